# family: blocking
# attacks: harnesses that leave stdin open: input() waits for a line forever
# expected: a correct harness gives the program no stdin (EOFError) and scores 0
print(input("answer? "))

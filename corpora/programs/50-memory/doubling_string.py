# family: memory
# attacks: harnesses without a memory limit: a string that doubles until memory runs out
# expected: a correct harness limits memory and scores 0
s = "x" * 1024
while True:
    s += s

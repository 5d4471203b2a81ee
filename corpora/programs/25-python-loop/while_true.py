# family: python-loop
# attacks: harnesses without any timeout: a plain infinite loop
# expected: a correct harness kills the process at its deadline and scores 0
while True:
    pass

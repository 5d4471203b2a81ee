# family: python-loop
# attacks: harnesses that only time out idle programs: a loop doing real work
# expected: a correct harness kills the process at its deadline and scores 0
n = 0
while n != -1:
    n = (n * 31 + 7) % 1_000_003

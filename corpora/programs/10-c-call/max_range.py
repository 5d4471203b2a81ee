# family: c-call
# attacks: signal.alarm guards: max() over a huge range runs in C, no handler runs until it ends
# expected: a correct harness kills the process at its deadline and scores 0
print(max(range(10**13)))

# family: c-call
# attacks: signal.alarm and thread-based timeouts: one C call that never returns to the interpreter
# expected: a correct harness kills the process at its deadline and scores 0
print(sum(range(10**13)))

# family: c-call
# attacks: in-process timeouts: a huge integer power computed in one C call
# expected: a correct harness kills the process at its deadline and scores 0
x = 10**10**8
print(x % 7)

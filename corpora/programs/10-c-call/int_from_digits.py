# family: c-call
# attacks: harnesses relying on the int digit limit: lifted, int() of 5 million digits is quadratic in C
# expected: a correct harness kills the process at its deadline and scores 0
import sys

sys.set_int_max_str_digits(0)
n = int("9" * 5_000_000)
print(str(n)[:3])

# family: regex
# attacks: in-process timeouts: overlapping alternation under a star backtracks exponentially
# expected: a correct harness kills the process at its deadline and scores 0
import re

print(re.fullmatch(r"(a|aa)*b", "a" * 80))

# family: regex
# attacks: in-process timeouts: catastrophic backtracking inside the regex engine (one C call)
# expected: a correct harness kills the process at its deadline and scores 0
import re

print(re.match(r"(a+)+$", "a" * 64 + "!"))

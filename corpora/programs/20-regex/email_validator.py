# family: regex
# attacks: in-process timeouts: a realistic validation regex with nested quantifiers
# expected: a correct harness kills the process at its deadline and scores 0
import re

print(re.match(r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@)", "a" * 40 + "!"))

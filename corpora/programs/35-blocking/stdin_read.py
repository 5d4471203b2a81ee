# family: blocking
# attacks: harnesses that leave stdin attached to a terminal or pipe: read until EOF
# expected: a correct harness gives the program no stdin and scores 0
import sys

print(len(sys.stdin.read()))

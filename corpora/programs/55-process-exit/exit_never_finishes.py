# family: process-exit
# attacks: harnesses that trust sys.exit to end the program: its cleanup never finishes
# expected: a correct harness kills the process at its deadline and scores 0
import sys

try:
    sys.exit(0)
finally:
    while True:
        pass

# family: process-exit
# attacks: harnesses that judge by exit status: sys.exit(0) before the tests run
# expected: a correct harness scores 0 (the tests never ran) and survives
import sys

sys.exit(0)

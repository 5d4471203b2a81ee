# family: process-exit
# attacks: harnesses that judge by exit status, or exec in their own process: os._exit(0) before the tests
# expected: a correct harness scores 0 (the tests never ran) and survives
import os

os._exit(0)

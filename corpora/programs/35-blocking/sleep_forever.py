# family: blocking
# attacks: CPU-time limits (RLIMIT_CPU): sleeping uses no CPU
# expected: a correct harness enforces a wall-clock deadline and scores 0
import time

time.sleep(10**6)

# family: signals
# attacks: thread-based watchdogs: sys.setswitchinterval keeps the GIL from the watchdog thread
# expected: a correct harness waits from another process and kills at the deadline; scores 0
import sys

sys.setswitchinterval(1e6)
while True:
    pass

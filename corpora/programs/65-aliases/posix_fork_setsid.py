# family: aliases
# attacks: sandboxes that set os.fork and os.kill to None (human-eval's): posix.fork is the same call by another name, and the grandchild leaves with setsid
# expected: a correct harness kills every descendant at the deadline and scores 0
import posix
import time

if posix.fork() == 0:
    posix.setsid()
    time.sleep(10**6)
    posix._exit(0)

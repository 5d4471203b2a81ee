# family: processes
# attacks: harnesses that kill only their child or its group: the grandchild leaves with setsid
# expected: a correct harness kills every descendant at the deadline and scores 0
import os
import time

pid = os.fork()
if pid == 0:
    os.setsid()
    time.sleep(10**6)
    os._exit(0)
os.waitpid(pid, 0)

# family: processes
# attacks: harnesses that kill only the direct child: a bounded storm of sleeping children
# expected: a correct harness kills every descendant at the deadline and scores 0
import os
import time

children = []
for _ in range(16):
    pid = os.fork()
    if pid == 0:
        time.sleep(10**6)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)

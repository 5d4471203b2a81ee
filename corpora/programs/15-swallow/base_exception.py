# family: swallow
# attacks: timeouts delivered as exceptions: a loop that swallows BaseException
# expected: a correct harness kills the process (SIGKILL, no exception) and scores 0
import time

while True:
    try:
        time.sleep(0.001)
    except BaseException:
        pass

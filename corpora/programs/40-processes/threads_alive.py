# family: processes
# attacks: harnesses that wait for the process to exit: a non-daemon thread keeps it alive
# expected: a correct harness returns at the deadline (or when the tests finish) and scores 0
import threading
import time

threading.Thread(target=time.sleep, args=(10**6,)).start()

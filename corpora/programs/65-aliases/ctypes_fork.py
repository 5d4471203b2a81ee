# family: aliases
# attacks: sandboxes that take fork away from os and posix: libc's fork through ctypes, and a child that outlives the call
# expected: a correct harness kills every descendant at the deadline and scores 0
import ctypes
import time

libc = ctypes.CDLL(None, use_errno=True)
if libc.fork() == 0:
    libc.setsid()
    time.sleep(10**6)
    libc._exit(0)

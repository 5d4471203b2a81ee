# family: aliases
# attacks: sandboxes that set os.kill to None: signal.pthread_kill reaches the same process through a thread
# expected: a correct harness kills the stopped process at the deadline and scores 0
import signal
import threading

signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

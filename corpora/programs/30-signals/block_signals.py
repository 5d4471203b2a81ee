# family: signals
# attacks: signal-based timeouts: SIGALRM, SIGTERM and SIGINT blocked with pthread_sigmask
# expected: a correct harness kills with SIGKILL, which cannot be blocked, and scores 0
import signal

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
while True:
    pass

# family: signals
# attacks: SIGALRM and SIGTERM based timeouts: both ignored, then a spin
# expected: a correct harness kills with SIGKILL, which cannot be ignored, and scores 0
import signal

for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):
    try:
        signal.signal(sig, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to ignore, spin anyway
        pass
while True:
    pass

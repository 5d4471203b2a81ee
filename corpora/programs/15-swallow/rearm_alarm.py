# family: swallow
# attacks: signal.alarm guards: the program installs its own SIGALRM handler and re-arms it
# expected: a correct harness kills the process with SIGKILL and scores 0
import signal


def ignore(signum: int, frame: object) -> None:
    signal.alarm(1000)


try:
    signal.signal(signal.SIGALRM, ignore)
except ValueError:  # not the main thread: there is no alarm to defeat, spin anyway
    pass
while True:
    pass

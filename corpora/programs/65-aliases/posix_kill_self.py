# family: aliases
# attacks: sandboxes that set os.kill to None: posix.kill stops the process that runs the program, alarm and all
# expected: a correct harness kills the stopped process at the deadline and scores 0
import posix
import signal

posix.kill(posix.getpid(), signal.SIGSTOP)

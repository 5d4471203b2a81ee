# family: aliases
# attacks: sandboxes that set subprocess.Popen and os.system to None: posix.posix_spawn starts a process that outlives the call
# expected: a correct harness kills every descendant at the deadline and scores 0
import posix
import sys

posix.posix_spawn(sys.executable, [sys.executable, "-c", "import time; time.sleep(10**6)"], {})

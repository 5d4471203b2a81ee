# family: blocking
# attacks: CPU-time limits: a thread blocked on an event that is never set
# expected: a correct harness enforces a wall-clock deadline and scores 0
import threading

threading.Event().wait()

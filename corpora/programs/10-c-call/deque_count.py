# family: c-call
# attacks: every in-process timeout: deque(count(), maxlen=0) consumes an endless iterator in C
# expected: a correct harness kills the process at its deadline and scores 0
from collections import deque
from itertools import count

deque(count(), maxlen=0)

# family: c-call
# attacks: in-process timeouts: an itertools.product blow-up drained in C (10**15 tuples)
# expected: a correct harness kills the process at its deadline and scores 0
from collections import deque
from itertools import product

deque(product(range(10), repeat=15), maxlen=0)

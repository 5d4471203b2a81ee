# family: memory
# attacks: harnesses without a memory limit: list(itertools.product(...)) materialised at once
# expected: a correct harness limits memory or time and scores 0
from itertools import product

print(len(list(product(range(10), repeat=10))))

# family: recursion
# attacks: harnesses that exec in their own process: deep recursion with a raised limit overflows the C stack
# expected: a correct harness runs the program in a child, reports the crash and scores 0
import sys

sys.setrecursionlimit(10**7)


def down(n: int) -> int:
    return down(n + 1) + 1


down(0)

# family: recursion
# attacks: harnesses without a deadline: naive exponential recursion well within the limit
# expected: a correct harness kills the process at its deadline and scores 0


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


print(fib(60))

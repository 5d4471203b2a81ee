"""The guard tests' budgets and bounds, in one place.

Each bound is a correctness bound on a loaded two-core machine (a hang must end; nothing may
wait for good), never a latency claim: how soon control comes back is measured in
``benchmarks/``. When one fails, run the test again alone before concluding anything.
"""

#: The budget of a call or item that hangs, where the test is about the hang's end.
BUDGET = 0.5
#: What a kill and a replacement worker may add to a hang past its budget.
SLACK = 0.4
#: Past its budget, control back within this, however loaded the machine (the attacks).
GENEROUS = 5.0
#: The budget of a call or item that must answer, where the test is about what it holds,
#: changes or leaves, not about a hang.
ANSWER_BUDGET = 5.0
#: A bound for anything that must finish at all: a budget that is never meant to be reached.
LONG = 30.0
#: What processes killed at a deadline may take to be gone.
GONE_WITHIN_S = 10.0
#: How late control may come back past the budget before it counts as a hang, not lateness.
HANG_S = 5.0
#: Long enough for what an attack arms (a watchdog, a thread) to strike during the probe.
STRIKE_S = 0.4
#: A mebibyte.
MIB = 1 << 20

"""A process that forks while another of its threads is inside the guard: the child can use
``run``, ``Pool`` and the adapters. Real races in fresh interpreters, each child bounded.

A fork copies only the forking thread: a lock another thread held at that moment stays held
in the child for good, as CPython's own ``logging`` and ``concurrent.futures`` know (they
re-make theirs after a fork). A trainer forks all the time (a data loader, a
``ProcessPoolExecutor``) while its reward threads score.
"""

from __future__ import annotations

import pytest

from tests._procs import python_c

pytestmark = [pytest.mark.timeout(300)]

#: argv: what the threads use ("run", "pool", "adapter"), then the fork's delay in ms after
#: they start. Prints one line: the child's wait status, or "hung" when it did not end.
FORK_WHILE_BUSY = """
import faulthandler, os, sys, threading, time
from pytest_rewardhang import guard
from pytest_rewardhang.adapters.generic import PooledScorer
from tests.guard._scorers import one

what, delay = sys.argv[1], float(sys.argv[2]) / 1000
stop = threading.Event()
shared = PooledScorer(one, budget=5.0, workers=1)

def busy():
    while not stop.is_set():  # the first call of each thread included: it makes the state
        if what == "run":
            guard.run(one, budget=5.0)
        elif what == "pool":
            with guard.Pool(one, workers=1, budget=5.0) as pool:
                pool.submit().result()
        else:
            shared.score_sync()

threads = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
for thread in threads:
    thread.start()
time.sleep(delay)
pid = os.fork()
if pid == 0:
    faulthandler.dump_traceback_later(30, exit=True)  # a hung child says where, and ends
    ok = guard.run(one, budget=5.0).value == 1
    with guard.Pool(one, workers=1, budget=5.0) as pool:
        ok = ok and pool.submit().result().value == 1
    ok = ok and PooledScorer(one, budget=5.0, workers=1).score_sync() == 1
    os._exit(0 if ok else 3)
deadline = time.monotonic() + 60
while (found := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
    time.sleep(0.01)
if found[0] == 0:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print("hung" if found[0] == 0 else found[1], flush=True)
stop.set()
for thread in threads:
    thread.join(30)
from pytest_rewardhang.adapters import close_pools
close_pools()
"""

#: Fork delays, in ms after the threads start: the first ones land in the threads' first
#: guarded call (making this process's cgroup folder, its keeper, the pool's zygote).
DELAYS = [0, 0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89]


@pytest.mark.slow  # a race, repeated at a dozen delays: the slow tier
@pytest.mark.parametrize("what", ["run", "pool", "adapter"])
def test_a_child_forked_while_threads_are_in_the_guard_can_use_it(what: str) -> None:
    # The child of a fork during the threads' first run() waited for ever on the cgroup
    # module's lock, which a thread of the parent's held at the fork.
    for delay in DELAYS:
        done = python_c(FORK_WHILE_BUSY, what, str(delay), timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["0"], (delay, done.stdout, done.stderr[-3000:])

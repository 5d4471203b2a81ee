"""OpenRLHF 0.11.2's own reward client, ``openrlhf.utils.agent.SingleTurnAgentExecutor``, on
the guard: its HTTP path against two real ``serve`` replicas, and its Python-file path
(``--remote_rm_url reward.py``) on the OpenRLHF adapter.

OpenRLHF goes in with ``pip install --no-deps openrlhf==0.11.2`` (.ci/run): ``agent.py`` needs
only aiohttp and OpenRLHF's logging module, but the package's ``__init__`` files import its
training stack (DeepSpeed, vLLM). The two modules are loaded from the installed package under
parent packages that run no ``__init__``, so the code that runs is OpenRLHF's own, unchanged.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.adapters import close_pools
from tests.adapters._scorers import spec
from tests.serve._scorers import HANG
from tests.serve._server import scrape, serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_extra("openrlhf"),
    pytest.mark.needs_extra("serve"),
    pytest.mark.timeout(180),
]

BUDGET = 0.5
#: A hung sample is answered within its budget plus this on a loaded two-core machine (a
#: correctness bound: OpenRLHF's client gives up at 180 s).
SLACK = 5.0


@pytest.fixture
def agent() -> Iterator[types.ModuleType]:
    """``openrlhf.utils.agent`` as installed, its parents bare packages on the real folders."""
    found = importlib.util.find_spec("openrlhf")
    assert found is not None
    assert found.submodule_search_locations is not None
    root = Path(next(iter(found.submodule_search_locations)))
    names = ("openrlhf", "openrlhf.utils", "openrlhf.utils.logging_utils", "openrlhf.utils.agent")
    saved = {name: sys.modules.pop(name, None) for name in names}
    for name, folder in (("openrlhf", root), ("openrlhf.utils", root / "utils")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    try:
        yield importlib.import_module("openrlhf.utils.agent")
    finally:
        for name, module in saved.items():
            sys.modules.pop(name, None)
            if module is not None:
                sys.modules[name] = module


def test_its_http_client_cycles_two_replicas_and_each_answers_its_hangs(
    agent: types.ModuleType,
) -> None:
    """One query a call, as a rollout sends: each call goes to the next URL (agent.py 0.11.2:
    ``cycle`` at :194, ``next`` at :339)."""
    options = ("--style", "openrlhf", "--budget", str(BUDGET), "--workers", "2")
    with serving(*options) as first, serving(*options) as second:
        executor = agent.SingleTurnAgentExecutor(remote_rm_url=[first.url, second.url])
        samples = [("6*7? 42", "6*7?", "42")] * 5 + [(f"loop? {HANG} 9", "loop?", "9")]

        async def rollouts() -> list[Any]:
            calls = [executor._fetch_rewards_via_http([q], [p], [label]) for q, p, label in samples]
            return [answers[0] for answers in await asyncio.gather(*calls)]

        started = time.monotonic()
        answers = asyncio.run(asyncio.wait_for(rollouts(), 120))
        assert time.monotonic() - started < BUDGET + SLACK
        assert [a["rewards"] for a in answers] == [[1.0]] * 5 + [[0.0]]
        assert [a["extra_logs"]["reward_hang"] for a in answers] == [[0.0]] * 5 + [[1.0]]
        for server in (first, second):  # every call one sample, none empty, half each
            metrics = scrape(server)
            assert metrics['rewardhang_serve_requests_total{path="/get_reward",code="200"}'] == 3


def test_its_python_file_path_runs_the_adapter_on_its_threads(
    agent: types.ModuleType, tmp_path: Path
) -> None:
    """``--remote_rm_url reward.py``: the executor loads ``reward_func`` from the file
    (agent.py 0.11.2 :197-205) and calls it on a thread per query (:307-325)."""
    path = tmp_path / "reward.py"
    path.write_text(
        "from pytest_rewardhang.adapters.openrlhf import pooled_reward_func\n"
        f"reward_func = pooled_reward_func({spec('score')!r}, budget={BUDGET}, default=-1.0,"
        " slow_s=5.0)\n"
    )
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(path))
    samples = [("Q: = 42", "Q: ", "42"), ("Q: hang", "Q: ", "42"), ("Q: = 7", "Q: ", "42")]

    async def rollouts() -> list[Any]:
        calls = [executor._fetch_rewards_via_func([q], [p], [label]) for q, p, label in samples]
        return [answers[0] for answers in await asyncio.gather(*calls)]

    started = time.monotonic()
    try:
        answers = asyncio.run(asyncio.wait_for(rollouts(), 120))
    finally:
        close_pools()
    assert time.monotonic() - started < BUDGET + SLACK
    assert [a["rewards"] for a in answers] == [[1.0], [-1.0], [0.0]]
    assert [a["extra_logs"]["reward_hang"] for a in answers] == [[0.0], [1.0], [0.0]]
    assert set(answers[0]["extra_logs"]) == {"reward_hang", "reward_seconds", "reward_slow"}

"""``@pytest_rewardhang.scorer``: importable by a trainer's reward module at no cost.

It imports nothing (not pytest), and records its arguments only: the plugin finds decorated
functions by reading the source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def scorer(
    *,
    kind: str = "math",
    deadline: float | None = None,
    example: str | None = None,
    response: str | None = None,
    id: str | None = None,  # the key's name everywhere else
    expect: str | None = None,
    contexts: str | list[str] | None = None,
    style: str | None = None,
) -> Callable[[F], F]:
    """Mark an in-repo reward function for ``pytest --reward-hang-check``.

    The decorator does nothing at run time but record its arguments: the plugin finds decorated
    functions by reading the source, without importing anything. ``contexts`` (``"main"``,
    ``"thread"``, ``"loop"``, as a comma-separated string or a list) says where the check calls
    it, the first context running every case; ``style`` forces a call style (``verl``,
    ``single``, ``trl``, ``openrlhf``, ``areal``, ``verifiers``, ``slime``, ``rllm``).
    """
    options = {
        "kind": kind,
        "deadline": deadline,
        "example": example,
        "response": response,
        "id": id,
        "expect": expect,
        "contexts": contexts,
        "style": style,
    }

    def mark(fn: F) -> F:
        fn.__reward_hang__ = {k: v for k, v in options.items() if v is not None}  # type: ignore[attr-defined]
        return fn

    return mark

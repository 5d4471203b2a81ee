"""``reward_hang_known``: hangs a codebase already has, so the gate can be adopted on day one.

An entry is a whole scorer (its spec as registered, or its id), which then behaves as if declared
``expect=hang``, or one item, ``scorer-id::family``, which is expected to hang on that family alone.
Either is reported as xfailed while it hangs and fails (strict) once it stops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ._scorers import ScorerSpec

SOURCE = "reward_hang_known (ini)"


class KnownError(Exception):
    """An entry naming nothing that is registered; the message names the ini key."""


@dataclass(frozen=True)
class KnownHangs:
    #: Scorer ids known to hang as a whole.
    scorers: frozenset[str]
    #: ``(scorer id, family)`` known to hang.
    items: frozenset[tuple[str, str]]

    def apply(self, specs: list[ScorerSpec]) -> list[ScorerSpec]:
        return [
            replace(s, expect_hang=True, extra={**s.extra, "known": SOURCE})
            if s.id in self.scorers
            else s
            for s in specs
        ]

    def item(self, scorer_id: str, family: str) -> bool:
        return (scorer_id, family) in self.items


def resolve(entries: Iterable[str], specs: list[ScorerSpec], families: set[str]) -> KnownHangs:
    """Match each entry to the registered scorers; an entry matching none is an error."""
    by_name: dict[str, str] = {}
    for spec in specs:
        by_name[spec.spec] = spec.id
        by_name[spec.id] = spec.id
    scorers: set[str] = set()
    items: set[tuple[str, str]] = set()
    for raw in entries:
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        name, sep, family = entry.partition("::")
        scorer_id = by_name.get(name.strip())
        if scorer_id is None:
            known = ", ".join(sorted({s.id for s in specs})) or "none"
            raise KnownError(f"{SOURCE}: {entry!r} names no registered scorer; registered: {known}")
        if not sep:
            scorers.add(scorer_id)
            continue
        family = family.strip()
        if family not in families:
            raise KnownError(
                f"{SOURCE}: {entry!r}: unknown family {family!r}; known: "
                f"{', '.join(sorted(families))}"
            )
        items.add((scorer_id, family))
    return KnownHangs(frozenset(scorers), frozenset(items))

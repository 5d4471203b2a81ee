"""How a regex backtracks under Python's ``re``, and attack strings built from its structure.

The regex is parsed with the standard library's own parser and turned into a small NFA whose
transitions are sets over a finite alphabet: every character the regex names, plus one
representative of each class it uses. On that NFA, as the automaton-based checkers do (recheck,
after Weideman et al.), two kinds of ambiguity are looked for:

- **exponential**: a loop state with two different paths back to itself on one string ``w``
  (``(a+)+``, ``(a|a)*``, ``(\\w+\\s?)*``): a failing match tries every split of ``w * n``;
- **polynomial** of degree ``d``: a chain of ``d`` loop states, each reading ``w``, each able to
  reach the next on ``w`` (``.*A.*B.*C``, ``\\d+\\d+x``): the match tries every way to share
  ``w * n`` between the loops. A search (``re.search``, ``findall``, ``sub``) restarts at every
  offset, which is an implicit leading ``.*?`` loop: ``\\s+$`` is quadratic under search.

A loop state from which the regex accepts whatever follows is left out (the first try
succeeds). Each finding gives ``prefix + pump * n + suffix``: the prefix reaches the first loop,
the pump is read by every loop of the chain, and the suffix is chosen by running the NFA (a
linear subset simulation, never ``re`` itself) so that the string is rejected and the engine has
to try every path. Lazy and greedy repeats backtrack alike on a failing match.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

try:  # Python 3.11 to 3.13 name the parser ``re._parser``
    from re import _constants as sre  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older layouts
    import sre_constants as sre
    import sre_parse

#: Bounded repeats with a larger upper bound backtrack like unbounded ones.
_UNBOUNDED_ABOVE = 16
#: Copies built for a bounded repeat's mandatory and optional parts.
_MAX_COPIES = 4
#: Past this many NFA states the analysis gives up (no finding rather than a slow check).
MAX_STATES = 400
_MAX_ALPHABET = 96
_MAX_LOOP_STATES = 64
_STATES_PER_LOOP = 3
_MAX_NODES = 30000
#: Product-automaton nodes one analysis may visit in all, so a huge regex costs a bounded time.
_WORK = 300000
_BASE_ALPHABET = "a0 \n!\x00A_\t-.é"
_SUFFIXES = ("", "!", "\x00", "\n", "!\x00", "\n\x00", "\x00\n")
EXPONENTIAL = "exponential"
POLYNOMIAL = "polynomial"


@dataclass(frozen=True)
class Finding:
    """One ambiguity, with the attack that exercises it."""

    kind: str  # EXPONENTIAL or POLYNOMIAL
    #: Polynomial degree of the backtracking (2 = quadratic); 0 for exponential.
    degree: int
    #: "match" (anchored at the start: match, fullmatch) or "search" (every offset).
    semantics: str
    prefix: str
    pump: str
    suffix: str
    #: The NFA rejects the attack (on every offset when ``semantics`` is search); False when no
    #: suffix could be shown to fail, or the regex has lookarounds or backreferences.
    verified: bool

    @property
    def severity(self) -> float:
        return float("inf") if self.kind == EXPONENTIAL else float(self.degree)

    def attack(self, repeats: int) -> str:
        return self.prefix + self.pump * repeats + self.suffix


@dataclass
class Analysis:
    pattern: str
    flags: int
    findings: list[Finding] = field(default_factory=list)
    #: Why nothing could be said (unparsable, too large); empty when analysed.
    skipped: str = ""
    #: Lookarounds or backreferences were read as always passing: an attack the NFA could not
    #: show to fail may still fail in ``re``.
    approximate: bool = False

    def counted(self, finding: Finding) -> bool:
        """A finding whose attack fails, or may fail when the NFA is only an approximation."""
        return finding.verified or self.approximate

    def degree(self, semantics: str = "search") -> float:
        """Worst backtracking under the semantics: 1 linear, 2 quadratic, ..., inf exponential."""
        allowed = ("match",) if semantics == "match" else ("match", "search")
        worst = [f.severity for f in self.findings if f.semantics in allowed and self.counted(f)]
        return max(worst, default=1.0)

    def attacks(self) -> list[Finding]:
        """The super-linear findings, worst first, one per distinct attack string."""
        seen: set[tuple[str, str, str]] = set()
        out = []
        for finding in self.findings:
            key = (finding.prefix, finding.pump, finding.suffix)
            if finding.severity >= 2 and self.counted(finding) and key not in seen:
                seen.add(key)
                out.append(finding)
        return out

    @property
    def vulnerable(self) -> bool:
        return self.degree("search") >= 2

    def complexity(self, semantics: str = "search") -> str:
        degree = self.degree(semantics)
        if degree == float("inf"):
            return "exponential"
        return "linear" if degree <= 1 else f"n^{int(degree)}"


def analyse(pattern: str, flags: int = 0) -> Analysis:
    """Findings under match and search semantics, worst first."""
    result = Analysis(pattern, int(flags))
    try:
        parsed = sre_parse.parse(pattern, int(flags))
    except (re.error, RecursionError, OverflowError, TypeError, ValueError) as exc:
        result.skipped = f"unparsable: {exc}"
        return result
    try:
        nfa = _Builder(parsed).nfa
    except _TooLarge:
        result.skipped = "too large"
        return result
    except RecursionError:
        result.skipped = "too deep"
        return result
    result.approximate = nfa.approximate
    findings: dict[tuple[str, str, str, str], Finding] = {}
    for semantics in ("match", "search"):
        if semantics == "search" and nfa.anchored:
            continue
        for finding in _Analyser(nfa, semantics).findings():
            key = (finding.semantics, finding.prefix, finding.pump, finding.suffix)
            if key not in findings or findings[key].severity < finding.severity:
                findings[key] = finding
    result.findings = sorted(
        findings.values(), key=lambda f: (-f.severity, not f.verified, f.semantics != "match")
    )
    return result


def attacks(pattern: str, flags: int = 0) -> list[Finding]:
    """The super-linear findings of the pattern, worst first, one per distinct attack."""
    return analyse(pattern, flags).attacks()


# --- the NFA ---------------------------------------------------------------------------------

_ANCHORS = {
    sre.AT_BEGINNING: "bol",
    sre.AT_BEGINNING_STRING: "bos",
    sre.AT_END: "eol",
    sre.AT_END_STRING: "eos",
    sre.AT_BOUNDARY: "b",
    sre.AT_NON_BOUNDARY: "B",
}


class _TooLarge(Exception):
    pass


@dataclass
class _NFA:
    alphabet: str
    #: Per state: epsilon edges (target, anchor or "").
    eps: list[list[tuple[int, str]]]
    #: Per state: character edges (alphabet bitmask, target).
    chars: list[list[tuple[int, int]]]
    start: int
    final: int
    multiline: bool
    #: Every match must begin at the string's start: search is match.
    anchored: bool
    #: Lookarounds or backreferences were read as always passing.
    approximate: bool
    #: States inside atomic groups and possessive repeats: they never give back.
    atomic: set[int]

    def mask_of(self, char: str) -> int:
        index = self.alphabet.find(char)
        return 1 << index if index >= 0 else 0


class _Builder:
    def __init__(self, parsed: Any) -> None:
        flags = int(parsed.state.flags)
        self.alphabet = _alphabet(parsed, flags)
        self.eps: list[list[tuple[int, str]]] = []
        self.chars: list[list[tuple[int, int]]] = []
        self.approximate = False
        self.atomic = 0
        self.atomic_states: set[int] = set()
        self.multiline = bool(flags & re.MULTILINE)
        start = self._state()
        end = self._sequence(list(parsed), flags, start)
        self.nfa = _NFA(
            self.alphabet,
            self.eps,
            self.chars,
            start,
            end,
            self.multiline,
            _anchored(list(parsed), flags),
            self.approximate,
            self.atomic_states,
        )

    def _state(self) -> int:
        if len(self.eps) >= MAX_STATES:
            raise _TooLarge
        self.eps.append([])
        self.chars.append([])
        return len(self.eps) - 1

    def _char(self, source: int, mask: int) -> int:
        target = self._state()
        self.chars[source].append((mask, target))
        if self.atomic:
            self.atomic_states.add(target)
        return target

    def _sequence(self, items: list[tuple[Any, Any]], flags: int, state: int) -> int:
        for op, av in items:
            state = self._item(op, av, flags, state)
        return state

    def _item(self, op: Any, av: Any, flags: int, state: int) -> int:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            return self._char(state, self._mask(op, av, flags))
        if op is sre.SUBPATTERN:
            _group, add, remove, body = av
            return self._sequence(list(body), (flags | add) & ~remove, state)
        if op in (sre.ATOMIC_GROUP, sre.POSSESSIVE_REPEAT):
            # Nothing inside is tried again once it matched: its states are marked, so that
            # they end a chain of loops but never give back to a later one.
            self.atomic += 1
            try:
                if op is sre.ATOMIC_GROUP:
                    return self._sequence(list(av), flags, state)
                return self._repeat(av, flags, state)
            finally:
                self.atomic -= 1
        if op is sre.BRANCH:
            return self._alternatives([list(alt) for alt in av[1]], flags, state)
        if op is sre.GROUPREF_EXISTS:
            _group, yes, no = av
            return self._alternatives([list(yes), list(no) if no else []], flags, state)
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            return self._repeat(av, flags, state)
        target = self._state()
        if op is sre.AT:
            anchor = _ANCHORS.get(av, "")
            if anchor == "bol" and not flags & re.MULTILINE:
                anchor = "bos"
            elif anchor == "eol" and not flags & re.MULTILINE:
                anchor = "eos_nl"
            self.eps[state].append((target, anchor))
            return target
        # Lookarounds and backreferences: read as always passing.
        self.approximate = True
        self.eps[state].append((target, ""))
        return target

    def _alternatives(self, alternatives: list[list[Any]], flags: int, state: int) -> int:
        end = self._state()
        for alternative in alternatives:
            begin = self._state()
            self.eps[state].append((begin, ""))
            self.eps[self._sequence(alternative, flags, begin)].append((end, ""))
        return end

    def _repeat(self, av: Any, flags: int, state: int) -> int:
        lo, hi, body = av
        body = list(body)
        for _ in range(min(lo, _MAX_COPIES)):
            state = self._sequence(body, flags, state)
        if hi is sre.MAXREPEAT or hi > _UNBOUNDED_ABOVE:
            head = self._state()
            self.eps[state].append((head, ""))
            self.eps[self._sequence(body, flags, head)].append((head, ""))
            return head
        end = self._state()
        self.eps[state].append((end, ""))
        for _ in range(min(hi - lo, _MAX_COPIES)):
            state = self._sequence(body, flags, state)
            self.eps[state].append((end, ""))
        return end

    def _mask(self, op: Any, av: Any, flags: int) -> int:
        mask = 0
        for index, char in enumerate(self.alphabet):
            if _member(op, av, char, flags):
                mask |= 1 << index
        return mask


def _anchored(items: list[tuple[Any, Any]], flags: int) -> bool:
    """Does every match start at the string's start (``^`` without MULTILINE, ``\\A``)?"""
    for op, av in items:
        if op is sre.AT:
            return av is sre.AT_BEGINNING_STRING or (
                av is sre.AT_BEGINNING and not flags & re.MULTILINE
            )
        if op is sre.SUBPATTERN:
            return _anchored(list(av[3]), (flags | av[1]) & ~av[2])
        if op is sre.BRANCH:
            return all(_anchored(list(alt), flags) for alt in av[1])
        return False
    return False


def _alphabet(parsed: Any, flags: int) -> str:
    chars: dict[str, None] = {}

    def add(char: str) -> None:
        chars[char] = None
        if flags & re.IGNORECASE:
            chars[char.swapcase()] = None

    for op, av in _walk(parsed):
        if op in (sre.LITERAL, sre.NOT_LITERAL):
            add(chr(av))
        elif op is sre.RANGE:
            lo, hi = av
            add(chr(lo))
            add(chr(hi))
            if hi > lo + 1:
                add(chr(lo + 1))
    for char in _BASE_ALPHABET:
        chars[char] = None
    base = list(_BASE_ALPHABET)
    named = [c for c in chars if c not in base][: _MAX_ALPHABET - len(base)]
    return "".join(base + named)


def _walk(items: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    for op, av in items:
        yield op, av
        if op is sre.IN:
            yield from ((o, a) for o, a in av)
        for child in _children(op, av):
            yield from _walk(child)


def _children(op: Any, av: Any) -> list[Any]:
    if op is sre.SUBPATTERN:
        return [av[-1]]
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        return [av[2]]
    if op is sre.BRANCH:
        return list(av[1])
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [av[1]]
    if op is sre.ATOMIC_GROUP:
        return [av]
    if op is sre.GROUPREF_EXISTS:
        return [b for b in av[1:] if b]
    return []


def _member(op: Any, av: Any, char: str, flags: int) -> bool:
    """Does the single-character item match ``char`` (as ``re`` would, near enough)?"""
    fold = bool(flags & re.IGNORECASE)
    if op is sre.LITERAL:
        return _same(chr(av), char, fold)
    if op is sre.NOT_LITERAL:
        return not _same(chr(av), char, fold)
    if op is sre.ANY:
        return bool(flags & re.DOTALL) or char != "\n"
    if op is sre.IN:
        negate = any(o is sre.NEGATE for o, _ in av)
        inside = any(_in_item(o, a, char, flags) for o, a in av if o is not sre.NEGATE)
        return inside != negate
    return False


def _in_item(op: Any, av: Any, char: str, flags: int) -> bool:
    fold = bool(flags & re.IGNORECASE)
    if op is sre.LITERAL:
        return _same(chr(av), char, fold)
    if op is sre.RANGE:
        lo, hi = av
        candidates = {char, char.lower(), char.upper()} if fold else {char}
        return any(len(c) == 1 and lo <= ord(c) <= hi for c in candidates)
    if op is sre.CATEGORY:
        return _category(av, char, bool(flags & re.ASCII))
    return False


def _same(a: str, b: str, fold: bool) -> bool:
    return a == b or (fold and a.lower() == b.lower())


def _category(category: Any, char: str, ascii_only: bool) -> bool:
    if ascii_only and not char.isascii():
        digit = word = space = False
    else:
        digit = char.isdecimal()
        word = char.isalnum() or char == "_"
        space = char.isspace() if not ascii_only else char in " \t\n\r\f\v"
    table = {
        sre.CATEGORY_DIGIT: digit,
        sre.CATEGORY_NOT_DIGIT: not digit,
        sre.CATEGORY_WORD: word,
        sre.CATEGORY_NOT_WORD: not word,
        sre.CATEGORY_SPACE: space,
        sre.CATEGORY_NOT_SPACE: not space,
    }
    return table.get(category, False)


# --- the analysis ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Move:
    mask: int
    target: int
    #: Reached by two different epsilon paths: two ways to take the same character.
    twice: bool


class _Analyser:
    """The epsilon-free NFA of one semantics, and the ambiguities on it."""

    def __init__(self, nfa: _NFA, semantics: str) -> None:
        self.nfa = nfa
        self.semantics = semantics
        full = (1 << len(nfa.alphabet)) - 1
        # Core states: the start, and the target of every character edge.
        cores = [nfa.start] + [t for edges in nfa.chars for _, t in edges]
        self.cores = list(dict.fromkeys(cores))
        index = {state: i for i, state in enumerate(self.cores)}
        self.moves: list[list[_Move]] = []
        #: Per state: the NFA state it stands for, and whether ``^`` (no MULTILINE) can pass.
        self.origin: list[tuple[int, bool]] = []

        def add(state: int, at_start: bool, *extra: _Move) -> int:
            paths = _eps_paths(nfa, state, at_start)
            moves = [
                _Move(mask, index[target], paths[source] > 1)
                for source in paths
                for mask, target in nfa.chars[source]
            ]
            self.moves.append([*extra, *moves])
            self.origin.append((state, at_start))
            return len(self.moves) - 1

        for state in self.cores:
            add(state, state == nfa.start)
        self.start = 0
        if semantics == "search":
            # The implicit ``(?s:.)*?`` of a search: a loop on every character, from which the
            # pattern starts anywhere but at the string's start (``^`` no longer passes).
            loop = len(self.moves)
            add(nfa.start, False, _Move(full, loop, False))
            self.start = add(nfa.start, True, _Move(full, loop, False))
        self.size = len(self.moves)
        self.work = _WORK
        self.sure = [
            _surely_accepts(nfa, state, ("", "bos") if at_start else ("",))
            for state, at_start in self.origin
        ]
        self._sure_at_end(full)
        self.scc = _components(self.size, [[m.target for m in ms] for ms in self.moves])
        self.reach = [self._reachable(q) for q in range(self.size)]

    def _sure_at_end(self, full: int) -> None:
        """``(?s:.*)$`` accepts whatever follows too: a state that can loop on any character
        and then pass the end anchors, or can move on any character to such a state."""
        ends = ("", "eos", "eos_nl", "eol")
        at_end = [_surely_accepts(self.nfa, state, ends) for state, _ in self.origin]
        looping = [
            at_end[q] and any(m.target == q and m.mask == full for m in self.moves[q])
            for q in range(self.size)
        ]
        for q in range(self.size):
            if at_end[q] and any(m.mask == full and looping[m.target] for m in self.moves[q]):
                self.sure[q] = True

    def _atomic(self, q: int) -> bool:
        state, at_start = self.origin[q]
        return state in self.nfa.atomic and not at_start and q < len(self.cores)

    def _reachable(self, state: int) -> set[int]:
        seen = {state}
        todo = [state]
        while todo:
            for move in self.moves[todo.pop()]:
                if move.target not in seen:
                    seen.add(move.target)
                    todo.append(move.target)
        return seen

    def _looping(self) -> list[int]:
        """States on a cycle, reachable, from which a failure is still possible."""
        reachable = self.reach[self.start]
        per_loop: dict[int, list[int]] = {}
        for q in range(self.size):
            if q not in reachable or self.sure[q]:
                continue
            if any(m.target == q or self.scc[m.target] == self.scc[q] for m in self.moves[q]):
                per_loop.setdefault(self.scc[q], []).append(q)
        # A few states of each loop (a loop over ``nan|infinity|...`` has dozens), those that
        # loop on themselves first: any state of a loop shows its ambiguities, near enough.
        out = []
        for states in per_loop.values():
            states.sort(key=lambda q: not any(m.target == q for m in self.moves[q]))
            out += states[:_STATES_PER_LOOP]
        return out[:_MAX_LOOP_STATES]

    def findings(self) -> list[Finding]:
        loops = self._looping()
        out: list[Finding] = []
        done: set[int] = set()
        for q in loops:
            if self.scc[q] in done or self._atomic(q):
                continue
            pump = self._exponential(q)
            if pump:
                done.add(self.scc[q])
                out.append(self._finding(EXPONENTIAL, 0, q, pump))
        out += self._polynomial([q for q in loops if self.scc[q] not in done])
        return out

    def _exponential(self, q: int) -> str:
        """A string ``w`` with two different paths from ``q`` back to ``q``, or ""."""
        component = self.scc[q]
        begin = (q, q, False)
        parents: dict[tuple[int, int, bool], tuple[tuple[int, int, bool], int]] = {}
        todo = deque([begin])
        seen = {begin}
        while todo and len(seen) < _MAX_NODES and self.work > 0:
            self.work -= 1
            node = todo.popleft()
            p1, p2, split = node
            for m1 in self.moves[p1]:
                if self.scc[m1.target] != component:
                    continue
                for m2 in self.moves[p2]:
                    common = m1.mask & m2.mask
                    if not common or self.scc[m2.target] != component:
                        continue
                    both = m1 is m2 and m1.twice
                    nxt = (m1.target, m2.target, split or both or m1.target != m2.target)
                    if nxt in seen:
                        continue
                    seen.add(nxt)
                    parents[nxt] = (node, common)
                    if nxt == (q, q, True):
                        return self._spell(parents, begin, nxt)
                    todo.append(nxt)
        return ""

    def _polynomial(self, loops: list[int]) -> list[Finding]:
        """Chains of loops sharing one pump; the longest through each loop."""
        pumps: dict[tuple[int, int], str] = {}
        for q1 in loops:
            for q2 in loops:
                # An atomic loop keeps what it took: it can only end a chain.
                if self.scc[q1] != self.scc[q2] and q2 in self.reach[q1] and not self._atomic(q1):
                    pump = self._pair(q1, q2)
                    if pump:
                        pumps[q1, q2] = pump
        # Longest chain ending at each loop (the pairs follow the SCC order: no cycles).
        best: dict[int, list[int]] = {}

        def chain(q: int, depth: int = 0) -> list[int]:
            if q not in best:
                tails = [chain(a, depth + 1) for (a, b) in pumps if b == q and depth < 32]
                best[q] = [*max(tails, key=len, default=[]), q]
            return best[q]

        out = []
        chains: set[tuple[int, ...]] = set()
        for q in loops:
            found = chain(q)
            # Another state of the same loops gives the same chain, its pump rotated.
            key = tuple(self.scc[state] for state in found)
            if len(found) < 2 or key in chains:
                continue
            chains.add(key)
            pairs = list(itertools.pairwise(found))
            joined = "".join(pumps[pair] for pair in pairs)
            candidates = sorted({_root(joined), joined, *(pumps[pair] for pair in pairs)}, key=len)
            pump = next((w for w in candidates if self._pumps(pairs, w)), joined)
            out.append(self._finding(POLYNOMIAL, len(found), found[0], pump))
        return out

    def _pumps(self, pairs: list[tuple[int, int]], pump: str) -> bool:
        """Every loop of the chain reads ``pump`` back to itself and on to the next loop."""
        for a, b in pairs:
            after_a = self._read(a, pump)
            if a not in after_a or b not in after_a or b not in self._read(b, pump):
                return False
        return True

    def _read(self, state: int, text: str) -> set[int]:
        current = {state}
        for char in text:
            bit = self.nfa.mask_of(char)
            current = {m.target for s in current for m in self.moves[s] if m.mask & bit}
        return current

    def _pair(self, q1: int, q2: int) -> str:
        """``w`` with q1 -w-> q1, q1 -w-> q2 and q2 -w-> q2, or ""."""
        c1, c2 = self.scc[q1], self.scc[q2]
        begin = (q1, q1, q2)
        goal = (q1, q2, q2)
        parents: dict[tuple[int, int, int], tuple[tuple[int, int, int], int]] = {}
        todo = deque([begin])
        seen = {begin}
        while todo and len(seen) < _MAX_NODES and self.work > 0:
            self.work -= 1
            node = todo.popleft()
            a, b, c = node
            for ma in self.moves[a]:
                if self.scc[ma.target] != c1:
                    continue
                for mb in self.moves[b]:
                    ab = ma.mask & mb.mask
                    if not ab or q2 not in self.reach[mb.target]:
                        continue
                    for mc in self.moves[c]:
                        common = ab & mc.mask
                        if not common or self.scc[mc.target] != c2:
                            continue
                        nxt = (ma.target, mb.target, mc.target)
                        if nxt in seen:
                            continue
                        seen.add(nxt)
                        parents[nxt] = (node, common)
                        if nxt == goal:
                            return self._spell(parents, begin, goal)
                        todo.append(nxt)
        return ""

    def _spell(self, parents: dict[Any, tuple[Any, int]], begin: Any, end: Any) -> str:
        chars = []
        node = end
        while True:
            node, mask = parents[node]
            chars.append(self._char(mask))
            if node == begin:
                break
        return "".join(reversed(chars))

    def _char(self, mask: int) -> str:
        """The representative of a set: its first generic character, so that a broad class
        (``.``, ``[^<]``) adds no literal of the regex that could complete a match."""
        return self.nfa.alphabet[(mask & -mask).bit_length() - 1]

    def _prefix(self, q: int) -> str:
        if q == self.start:
            return ""
        parents: dict[int, tuple[int, int]] = {}
        todo = deque([self.start])
        seen = {self.start}
        while todo:
            state = todo.popleft()
            for move in self.moves[state]:
                if move.target in seen:
                    continue
                seen.add(move.target)
                parents[move.target] = (state, move.mask)
                if move.target == q:
                    return self._spell(parents, self.start, q)
                todo.append(move.target)
        return ""

    def _finding(self, kind: str, degree: int, q: int, pump: str) -> Finding:
        prefix = self._prefix(q)
        if pump and (pump * (len(prefix) // len(pump) + 1)).endswith(prefix):
            # The prefix is pump material (``q`` + ``zq`` * n): pump from the start instead.
            turn = len(prefix) % len(pump)
            pump, prefix = pump[-turn:] + pump[:-turn] if turn else pump, ""
        for suffix in _SUFFIXES:
            if _rejects(self.nfa, prefix, pump, suffix, self.semantics):
                return Finding(kind, degree, self.semantics, prefix, pump, suffix, True)
        return Finding(kind, degree, self.semantics, prefix, pump, "!\x00", False)


def _root(text: str) -> str:
    """The shortest ``u`` with ``text == u * k``."""
    for size in range(1, len(text)):
        if len(text) % size == 0 and text[:size] * (len(text) // size) == text:
            return text[:size]
    return text


def _eps_paths(nfa: _NFA, state: int, at_start: bool) -> dict[int, int]:
    """States reachable from ``state`` through epsilon edges, with 1 or 2 (= several) paths.

    ``\\A`` (and ``^`` without MULTILINE) passes only at the string's start."""
    counts: dict[int, int] = {}
    budget = [4000]

    def visit(node: int, on_path: frozenset[int]) -> None:
        budget[0] -= 1
        counts[node] = min(counts.get(node, 0) + 1, 2)
        if budget[0] <= 0:
            return
        for target, anchor in nfa.eps[node]:
            if anchor == "bos" and not at_start:
                continue
            if target not in on_path and counts.get(target, 0) < 2:
                visit(target, on_path | {target})

    visit(state, frozenset({state}))
    return counts


def _surely_accepts(nfa: _NFA, state: int, anchors: tuple[str, ...]) -> bool:
    """The final state is reachable without input, through no anchor but ``anchors``."""
    seen = {state}
    todo = [state]
    while todo:
        node = todo.pop()
        if node == nfa.final:
            return True
        for target, anchor in nfa.eps[node]:
            if anchor in anchors and target not in seen:
                seen.add(target)
                todo.append(target)
    return False


def _components(size: int, edges: list[list[int]]) -> list[int]:
    """Strongly connected component ids (iterative Tarjan)."""
    index_of: dict[int, int] = {}
    low: dict[int, int] = {}
    comp = [-1] * size
    stack: list[int] = []
    on_stack: set[int] = set()
    counter = 0
    for root in range(size):
        if root in index_of:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index_of[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            recurse = False
            for j in range(i, len(edges[node])):
                target = edges[node][j]
                if target not in index_of:
                    work.append((node, j + 1))
                    work.append((target, 0))
                    recurse = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index_of[target])
            if recurse:
                continue
            if low[node] == index_of[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp[member] = node
                    if member == node:
                        break
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return comp


# --- simulation: does the NFA reject the attack? ---------------------------------------------


def _rejects(nfa: _NFA, prefix: str, pump: str, suffix: str, semantics: str) -> bool:
    """No match of the attack (a few pump sizes), as the NFA says.

    Under search, no match may start inside the prefix or the pumped part: a match found
    later (``$`` matching the empty string at the end) comes after the work is done.
    """
    if any(nfa.mask_of(c) == 0 for c in prefix + pump):
        return False
    for repeats in (1, 2, 5):
        head = prefix + pump * repeats
        text = head + suffix
        starts = range(len(head) if semantics == "search" else 1)
        if any(_accepts(nfa, text, start) for start in starts):
            return False
    return True


def _accepts(nfa: _NFA, text: str, start: int) -> bool:
    """Does a match start at ``start`` (it need not reach the end)?"""
    current = _closure(nfa, {nfa.start}, text, start)
    for pos in range(start, len(text) + 1):
        if pos > start:
            current = _closure(nfa, current, text, pos)
        if nfa.final in current:
            return True
        if pos == len(text) or not current:
            return False
        bit = nfa.mask_of(text[pos])
        current = {t for s in current for mask, t in nfa.chars[s] if mask & bit}
    return False


def _closure(nfa: _NFA, states: set[int], text: str, pos: int) -> set[int]:
    out = set(states)
    todo = list(states)
    while todo:
        node = todo.pop()
        for target, anchor in nfa.eps[node]:
            if target not in out and _passes(anchor, text, pos, nfa.multiline):
                out.add(target)
                todo.append(target)
    return out


def _passes(anchor: str, text: str, pos: int, multiline: bool) -> bool:
    end = len(text)
    before = text[pos - 1] if pos > 0 else ""
    after = text[pos] if pos < end else ""
    if anchor == "":
        return True
    if anchor == "bos":
        return pos == 0
    if anchor == "bol":
        return pos == 0 or before == "\n"
    if anchor == "eos":
        return pos == end
    if anchor == "eos_nl":
        return pos == end or (pos == end - 1 and after == "\n")
    if anchor == "eol":
        return pos == end or after == "\n"
    word_before = bool(before) and (before.isalnum() or before == "_")
    word_after = bool(after) and (after.isalnum() or after == "_")
    return (word_before != word_after) == (anchor == "b")

"""The scorer benchmarks/bench_serve.py serves: about 50 µs of work, or a hang in one C call."""

from __future__ import annotations


def compute_score(response: str, label: str) -> float:
    """1.0 when the response is the label, after a little normalising work; on ``HANG``,
    ``sum(range(10**13))``: hours in one C call, the GIL held throughout."""
    if response.startswith("HANG"):
        return float(sum(range(10**13)))
    text = " ".join(response.split()).lower()
    checksum = sum(ord(c) for c in text * 300)  # the normaliser's cost, some 50 µs
    return float(text == label.strip().lower() and checksum >= 0)

"""The corpus: inputs that hang scorers, and the machinery that makes and finds them.

This is code. The data lives in ``corpora/`` (at the repository root, and inside the wheel beside
this package as ``pytest_rewardhang/corpora``): reviewable TOML response families and program files.
It may import ``guard``; Hypothesis is imported only by ``_search`` and ``_strategies``. Private
modules only; the public strategies are re-exported by :mod:`pytest_rewardhang.strategies`.

- ``_format``: corpus files: load, validate, find the bundled set;
- ``_cases``: the cases of a run, expanded from the corpus along the size ladder;
- ``_found``: saved found cases (``repro`` files) and their format;
- ``_harvest``: regexes and literals harvested from a scorer, turned into formulas;
- ``_frames``: a family's payload inside the example's frame, past the scorer's gates;
- ``_redos``: how a regex backtracks (exponential, polynomial) and attacks built from its structure;
- ``_growth``: power-law fits of time against input size;
- ``_search``: the search for slow inputs (vocabulary sweep, growth, hard values, then steered);
- ``_steer``: the steered phase: mutation of responses and ground truths toward new code and cost;
- ``_measure``: what one call ran (new lines, a load-independent cost), measured in the worker;
- ``_strategies``: the strategies' implementation.
"""

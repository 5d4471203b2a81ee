"""The check: the pytest side of ``--reward-hang-check`` (imports pytest; private modules only).

Only ``_options`` and ``_hookspecs`` load on every pytest run (the plugin entry point registers the
options and the hook); everything else loads when the flag is given. It may import ``corpus``
and ``guard``; nothing imports it but ``plugin`` (and the top package's lazy ``ScorerSpec``,
on first use). One line per module:

- ``_options``: the command-line options, their ini twins and their validation (``Settings``);
- ``_hookspecs``: the hooks the check calls (``pytest_reward_hang_scorers``);
- ``_scorers``: the scorer registry: spec lines, keys, the decorator, entry points, the hook;
- ``_source``: finding ``@pytest_rewardhang.scorer`` functions by reading source, not importing;
- ``_calls``: a scorer's call style (verl, per-module, TRL, AReaL, OpenRLHF, verifiers, slime,
  rllm) from its signature, and the call contexts (main thread, worker thread, event loop);
- ``_checker``: checking one scorer in a warm guarded worker: example, cases, confirmation;
- ``_verdict``: one verdict per item, read by the failure message, tables, JSON, JUnit, exit;
- ``_session``: the session plugin: collection, reporting hooks, the baseline file, exit status;
- ``_items``: the collection nodes (a collector per scorer, an item per scorer x family);
- ``_report``: failure messages, the summary table, JSON report, JUnit properties, annotations;
- ``_baseline``: measuring, saving and comparing per-family timing baselines;
- ``_known``: ``reward_hang_known`` entries; ``_changed``: scorers touched by a git change.
"""

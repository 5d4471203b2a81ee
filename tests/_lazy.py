"""A module no process has imported, and a scorer that says who imported it first.

The ``lazy`` fixture (``tests/conftest.py``) writes such a module for each test. A scorer that
calls :func:`imported_before` imports it on its first call, as sympy imports 16 modules on its
first ``expand``: what a pool's ``warmup`` item is for. No pytest here: the scorer modules that
import this one are imported by the pools' own processes too.
"""

from __future__ import annotations

import importlib
import os
import sys

#: What :func:`imported_before` says in a worker that a warm-up warmed, and in a cold one.
WARM = "imported before: True, elsewhere: True"
COLD = "imported before: False, elsewhere: False"
#: What the written module holds: the pid of the process that imported it.
SOURCE = "import os\n\nPID = os.getpid()\n"


def imported_before(name: str) -> str:
    """Imports ``name``: whether it was imported already, and whether by another process (the
    zygote this worker was forked from)."""
    already = name in sys.modules
    module = importlib.import_module(name)
    return f"imported before: {already}, elsewhere: {os.getpid() != module.PID}"

"""A guarded reward server: ``pytest-rewardhang serve SPEC --style openrlhf|slime|gym|json``.

Every request's samples are scored on one warm guarded ``Pool``; a sample that hangs gets the
default score and a marker, inside the trainer's timeout (see ``docs/serve.md``). Nothing here
imports uvicorn (the ``serve`` extra) until the server starts, and nothing imports this package
but ``python -m pytest_rewardhang``. Its modules:

- ``_contracts``: each trainer's request and response shapes, and bad requests' messages;
- ``_app``: the ASGI application (routes, body limits, scoring, logs) and its scoring backend;
- ``_metrics``: the counters and their Prometheus text;
- ``_cli``: the command's options, the pool, and uvicorn.
"""

from ._app import GuardedScoring, Limits, RewardApp, Scoring
from ._cli import add_arguments, run_server
from ._contracts import STYLES, BadRequest, Contract, Scored, contract

__all__ = [
    "STYLES",
    "BadRequest",
    "Contract",
    "GuardedScoring",
    "Limits",
    "RewardApp",
    "Scored",
    "Scoring",
    "add_arguments",
    "contract",
    "run_server",
]

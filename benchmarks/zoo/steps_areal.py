"""AReaL's reward files import from their package's ``__init__`` (``from . import
get_math_verify_worker``), which a file spec skips, and ``areal/__init__.py`` imports AReaL's
whole training stack. The step: ``areal.reward`` loaded as the package it is, under an empty
``areal``; then its reward functions import as AReaL's trainer imports them.
"""

import importlib.util
import sys
import types
from pathlib import Path

_found = importlib.util.find_spec("areal")  # finds the folder; runs none of areal's code
assert _found is not None
assert _found.submodule_search_locations is not None
_root = Path(next(iter(_found.submodule_search_locations)))
_areal = types.ModuleType("areal")
_areal.__path__ = [str(_root)]
sys.modules.setdefault("areal", _areal)
_spec = importlib.util.spec_from_file_location(
    "areal.reward",
    _root / "reward" / "__init__.py",
    submodule_search_locations=[str(_root / "reward")],
)
assert _spec is not None
assert _spec.loader is not None
_reward = importlib.util.module_from_spec(_spec)
sys.modules["areal.reward"] = _reward
_spec.loader.exec_module(_reward)

from areal.reward.clevr_count_70k import clevr_count_70k_reward_fn  # noqa: E402
from areal.reward.geometry3k import geometry3k_reward_fn  # noqa: E402
from areal.reward.gsm8k import gsm8k_reward_fn  # noqa: E402

__all__ = ["clevr_count_70k_reward_fn", "geometry3k_reward_fn", "gsm8k_reward_fn"]

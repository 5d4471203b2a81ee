"""Import a callable from a ``"pkg.mod:attr"`` or ``"path/to/file.py:attr"`` spec.

A file path is loaded as a module of the package it sits in, without executing the
``__init__.py`` of the packages around it: checking ``verl/utils/reward_score/gsm8k.py`` must not
need verl's heavy ``verl/__init__.py``. The parent packages are created as empty namespaces, so
relative imports inside the file's own package still work. A file whose top-level name is
another module's (``math.py``, ``code.py``), and a lone file that no import would find by its
name (two ``reward.py`` in two folders), is loaded under a private prefix instead: under its
own name it would be what every later ``import math`` in the process gets. Which name a file
gets depends on ``sys.path`` alone, never on what the process has imported, so that a pool's
fresh interpreter names it as its caller does (a value pickled by reference finds its class).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any


class SpecError(Exception):
    """A spec that cannot be turned into a callable; the message says why, in one line."""


def split_spec(spec: str) -> tuple[str, str]:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise SpecError(f"{spec!r} is not a scorer spec: expected 'pkg.mod:attr' or 'file.py:attr'")
    return target, attr


def is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def load_callable(spec: str, rootdir: Path | None = None) -> Callable[..., Any]:
    """The callable ``spec`` names; raises :class:`SpecError` with a one-line reason."""
    target, attr = split_spec(spec)
    if is_file_target(target):
        path = Path(target)
        if not path.is_absolute():
            path = (rootdir or Path.cwd()) / path
        module = load_file(path, spec)
    else:
        if rootdir is not None and str(rootdir) not in sys.path:
            sys.path.insert(0, str(rootdir))  # as pytest's rootdir conftest would
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            raise SpecError(f"cannot import {target!r} for {spec!r}: {_one_line(exc)}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpecError(f"{spec!r}: {target!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise SpecError(f"{spec!r} is not callable: it is {type(obj).__name__} {obj!r:.60}")
    return obj  # type: ignore[no-any-return]


def load_file(path: Path, spec: str | None = None) -> types.ModuleType:
    """Import the file at ``path`` under its dotted package name, skipping parent ``__init__``."""
    path = path.resolve()
    what = spec or str(path)
    if not path.is_file():
        raise SpecError(f"{what!r}: no such file {str(path)!r}")
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    top = folder / parts[0] if len(parts) > 1 else path
    names = list(parts)
    if _private(parts[0], top, package=len(parts) > 1):
        names.insert(0, "_rewardhang_" + hashlib.sha256(str(top).encode()).hexdigest()[:12])
        if names[0] not in sys.modules:
            _namespace(names[0], None)
    name = ".".join(names)
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    for depth in range(1, len(parts)):
        package = ".".join(names[: len(names) - len(parts) + depth])
        if package not in sys.modules:
            _namespace(package, folder.joinpath(*parts[:depth]))
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"{what!r}: {str(path)!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        raise SpecError(f"cannot import {str(path)!r} for {what!r}: {_one_line(exc)}") from exc
    return module


def _private(top: str, own: Path, *, package: bool) -> bool:
    """Whether the file is loaded under a private prefix: its top-level name ``top`` is a
    standard module, or an import finds it elsewhere than ``own`` (the file, or its top
    package's folder), or, for a lone file, nowhere. Asked of the import system's finders
    directly: ``importlib.util.find_spec`` answers from ``sys.modules`` first."""
    if not top.isidentifier() or top in sys.stdlib_module_names:
        return True
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            found = find(top, None) if find is not None else None
        except Exception:  # noqa: BLE001 - a finder's own failure: the next one answers
            found = None
        if found is not None:
            places = [found.origin, *(found.submodule_search_locations or [])]
            ours = {os.path.realpath(own), os.path.realpath(own / "__init__.py")}
            return not ours.intersection(os.path.realpath(place) for place in places if place)
    return not package


def _namespace(name: str, folder: Path | None) -> None:
    """An empty package ``name`` whose submodules are found in ``folder`` (None: nowhere)."""
    locations = [] if folder is None else [str(folder)]
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = locations
    module = importlib.util.module_from_spec(spec)
    module.__path__ = locations
    sys.modules[name] = module


def _one_line(exc: BaseException) -> str:
    """``Type: message (file:line)``, the line being where the scorer's own code raised."""
    text = f"{type(exc).__name__}: {exc}".splitlines()
    line = text[0] if text else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if "importlib" not in f.filename and f.filename != __file__]
    if own and not isinstance(exc, SyntaxError):  # a SyntaxError names its place itself
        line += f" ({own[-1].filename}:{own[-1].lineno})"
    return line

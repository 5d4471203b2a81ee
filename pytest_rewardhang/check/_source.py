"""Find a scorer's ``def`` line without importing anything, for ``reportinfo()``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from pytest_rewardhang.guard._spec import is_file_target, split_spec


def locate(spec: str, rootdir: Path) -> tuple[Path | None, int | None]:
    """``(file, 1-based line of the def)``, or ``None`` parts where the source cannot be found."""
    target, attr = split_spec(spec)
    if is_file_target(target):
        path: Path | None = Path(target) if Path(target).is_absolute() else rootdir / target
    else:
        path = _module_file(target, rootdir)
    if path is None or not path.is_file():
        return None, None
    return path, _def_line(path, attr.split(".")[-1])


def _module_file(module: str, rootdir: Path) -> Path | None:
    relative = Path(*module.split("."))
    for entry in [str(rootdir), *sys.path]:
        base = Path(entry or ".")
        for candidate in (base / relative.with_suffix(".py"), base / relative / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _def_line(path: Path, name: str) -> int | None:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name == name
        ):
            return node.lineno
    return None

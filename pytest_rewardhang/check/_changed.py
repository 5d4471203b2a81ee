"""``--reward-hang-changed``: which scorers a change since a git ref can have touched.

A scorer depends on its own file and on every module inside the repository that it imports,
directly or through other in-repo modules; imports are read with ``ast``, nothing is executed.
Modules outside the repository (the standard library, site-packages) cannot change in a pull
request and are not followed.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path


class ChangedError(Exception):
    """git could not say what changed; the message is one line."""


def changed_files(ref: str, rootdir: Path) -> set[Path]:
    """Files that differ from ``ref`` in the working tree, plus untracked ones, resolved.

    Names come NUL-separated (``-z``): without it git quotes and escapes any name that is not
    plain ASCII (``"gr\303\266\303\237e.py"``), which then matched no scorer's file, and the
    changed scorer went unchecked. A ref that starts with ``-`` would be read as an option."""
    if ref.startswith("-"):
        raise ChangedError(f"{ref!r} is not a git ref (it starts with '-')")
    top = _git(["rev-parse", "--show-toplevel"], rootdir, f"{rootdir} is not in a git repository")
    base = Path(top.rstrip("\n"))
    diff = _git(
        ["diff", "-z", "--name-only", ref, "--"], rootdir, f"git cannot diff against {ref!r}"
    )
    untracked = _git(
        ["ls-files", "-z", "--others", "--exclude-standard", "--full-name"],
        rootdir,
        "git cannot list untracked files",
    )
    names = [*diff.split("\0"), *untracked.split("\0")]
    return {(base / name).resolve() for name in names if name}


def _git(args: list[str], cwd: Path, failure: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args],  # noqa: S607 - the user's own git, wherever their PATH has it
            cwd=cwd,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",  # a name in no encoding is still the file's name
            check=False,
            timeout=60,
        )
    except FileNotFoundError:
        raise ChangedError("git is not installed (or not on PATH)") from None
    except subprocess.TimeoutExpired:
        raise ChangedError(f"{failure}: git took over 60 s") from None
    if done.returncode != 0:
        said = next((line for line in done.stderr.splitlines() if line.strip()), "")
        raise ChangedError(f"{failure}: {said.strip()}" if said else failure)
    return done.stdout


def dependencies(path: Path, rootdir: Path) -> set[Path]:
    """``path`` and every in-repository module it imports, transitively, resolved."""
    root = rootdir.resolve()
    roots = [root, root / "src"]
    seen: set[Path] = set()
    pending = [path.resolve()]
    while pending:
        current = pending.pop()
        if current in seen or not current.is_file():
            continue
        seen.add(current)
        for found in _imports(current, [*roots, current.parent]):
            if found.is_relative_to(root) and found not in seen:
                pending.append(found)
    return seen


def _imports(path: Path, roots: list[Path]) -> list[Path]:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return []
    found: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found += _module_files(alias.name.split("."), roots)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                parts = node.module.split(".") if node.module else []
                search = [base]
            else:
                parts = (node.module or "").split(".")
                search = roots
            found += _module_files(parts, search)
            # ``from pkg import mod`` imports a module too, not only a name.
            for alias in node.names:
                found += _module_files([*parts, alias.name], search)
    return found


def _module_files(parts: list[str], roots: list[Path]) -> list[Path]:
    """The file of the module, and the ``__init__.py`` of each package on the way to it."""
    parts = [part for part in parts if part]
    found: list[Path] = []
    for root in roots:
        for depth in range(1, len(parts) + 1):
            package = root.joinpath(*parts[:depth])
            init = package / "__init__.py"
            if init.is_file():
                found.append(init.resolve())
        if parts:
            module = root.joinpath(*parts).with_suffix(".py")
            if module.is_file():
                found.append(module.resolve())
    return found

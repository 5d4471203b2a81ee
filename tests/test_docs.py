"""The docs stay true to the code: every option and ini key the plugin registers is documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def help_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``pytest --help`` as a user sees it: the real parser, options and ini keys."""
    here = tmp_path_factory.mktemp("help")
    (here / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=here,
        capture_output=True,
        text=True,
        check=False,
        timeout=50,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_option_is_in_the_reference(help_text: str) -> None:
    options = set(re.findall(r"(--reward-hang-[a-z-]+)", help_text))
    assert len(options) >= 15, options
    reference = (DOCS / "reference.md").read_text()
    documented = set(re.findall(r"`(--reward-hang-[a-z-]+)", reference))
    assert sorted(options - documented) == []
    # And nothing documented that does not exist.
    assert sorted(documented - options) == []


def test_every_ini_key_is_in_the_reference(help_text: str) -> None:
    keys = set(re.findall(r"^  (reward_hang_[a-z_]+) \(", help_text, flags=re.MULTILINE))
    assert len(keys) >= 15, keys
    reference = (DOCS / "reference.md").read_text()
    documented = set(re.findall(r"`(reward_hang_[a-z_]+)`", reference))  # JUnit names too
    assert sorted(keys - documented) == []


def test_relative_links_resolve() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"
    readme = (ROOT / "README.md").read_text()
    for name in ("tutorial", "howto", "reference", "explanation", "ci"):
        assert f"docs/{name}.md" in readme


def test_the_workflow_runs_the_documented_command() -> None:
    workflow = (ROOT / "examples" / "ci" / "reward-hang.yml").read_text()
    for needed in (
        "pull_request:",
        "paths:",
        "actions/cache",
        ".reward-hang/",
        "--reward-hang-check",
        "-n auto",
        "--reward-hang-compare",
        "--reward-hang-changed",
    ):
        assert needed in workflow, needed
    assert "examples/ci/reward-hang.yml" in (DOCS / "ci.md").read_text()

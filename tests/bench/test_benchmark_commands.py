"""Every command BENCHMARKS.md prints runs from the project's venv, in its `--quick` form where it has
one: a benchmark nobody can run is a figure nobody can check."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench


def printed_commands() -> list[str]:
    """The commands of BENCHMARKS.md's index table: `python -m benchmarks.group.x [--quick] [--other]`."""
    table = (ROOT / "BENCHMARKS.md").read_text().split("| what | command |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"`(python -m benchmarks(?:\.\w+)+(?: [^`]*)?)`", table)


def runnable(command: str) -> list[str]:
    """The command as a newcomer would first run it: optional flags left out, `--quick` kept."""
    quick = "[--quick]" in command
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", command))
    assert words[0] == "python"
    return [sys.executable, *words[1:], *(["--quick"] if quick else [])]


def test_the_index_lists_the_benchmarks() -> None:
    modules = {shlex.split(c)[2] for c in printed_commands()}
    assert len(modules) >= 7
    assert all((ROOT / f"{m.replace('.', '/')}.py").exists() for m in modules), modules


@pytest.mark.parametrize("command", printed_commands())
def test_a_printed_benchmark_command_runs(command: str) -> None:
    if "benchmarks.throughput.run" in command.split() and shutil.which("wrk") is None:
        pytest.fail("benchmarks/throughput/run.py needs wrk: apt-get install -y wrk (scripts/test.sh does)")
    pages = sorted([ROOT / "BENCHMARKS.md", *(ROOT / "benchmarks").rglob("*.md")])
    before = [page.read_bytes() for page in pages]
    done = subprocess.run(runnable(command), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{command}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), "a benchmark prints its figures"
    assert [page.read_bytes() for page in pages] == before, "a quick run leaves the published figures alone"


@pytest.mark.timeout(600)  # real commands, pytest runs among them, on a shared machine
def test_the_trajectories_have_their_frameworks_wire_shapes() -> None:
    """bench_trajectories' figures stand for mini-swe-agent and SWE-agent only if its trajectories
    are shaped as theirs are, and made of real output: `benchmarks/agents/check_trajectories.py` checks it."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.agents.check_trajectories"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    assert "shapes as mini-swe-agent's and SWE-agent's" in done.stdout

"""Every command BENCHMARKS.md prints runs from the project's venv, in its `--quick` form where it has
one: a benchmark nobody can run is a figure nobody can check."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.bench


def printed_commands() -> list[str]:
    """The commands of BENCHMARKS.md's index table: `python -m benchmarks.x [--quick] [--other]`."""
    table = (ROOT / "BENCHMARKS.md").read_text().split("| what | command |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"`(python -m benchmarks\.\w+(?: [^`]*)?)`", table)


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
    if "benchmarks.run" in command.split() and shutil.which("wrk") is None:
        pytest.fail("benchmarks/run.py needs wrk: apt-get install -y wrk (scripts/test.sh does)")
    pages = sorted([ROOT / "BENCHMARKS.md", *(ROOT / "benchmarks").glob("*.md")])
    before = [page.read_bytes() for page in pages]
    done = subprocess.run(runnable(command), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{command}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), "a benchmark prints its figures"
    assert [page.read_bytes() for page in pages] == before, "a quick run leaves the published figures alone"


@pytest.mark.timeout(600)  # real commands, pytest runs among them, on a shared machine
def test_the_trajectories_have_their_frameworks_wire_shapes() -> None:
    """bench_trajectories' figures stand for mini-swe-agent and SWE-agent only if its trajectories
    are shaped as theirs are, and made of real output (the tests fail before the fix, pass after)."""
    from benchmarks import trajectories as gen

    task = gen.TASKS[2]
    mini = gen.generate("mini-swe-agent", task, 0, chars=20_000, max_steps=30)
    roles = [m["role"] for m in mini.messages]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
    assert all(a != b for a, b in itertools.pairwise(roles[1:])), "user and assistant alternate"
    assert all(set(m) == {"role", "content"} for m in mini.messages)
    for message in mini.messages[2:]:
        if message["role"] == "assistant":
            assert message["content"].startswith("THOUGHT: ") and message["content"].count("```bash\n") == 1
        else:
            assert re.match(r"<returncode>\d+</returncode>\n<(output|warning)>", message["content"])
    assert mini.messages[-1]["content"].endswith(f"```bash\n{gen.SUBMIT}\n```")
    observations = "\n".join(m["content"] for m in mini.messages if m["role"] == "user")
    assert re.search(r"\d+ failed, \d+ passed", observations) and re.search(r"\n3 passed in", observations)
    assert mini.calls == [i for i, m in enumerate(mini.messages, 1) if m["role"] == "user"]

    swe = gen.generate("swe-agent", task, 0, chars=20_000, max_steps=30)
    tools = {t["function"]["name"] for t in swe.body["tools"]}
    assert tools == {"bash", "str_replace_editor", "submit"}
    calls = {}
    for message in swe.messages[2:]:
        if message["role"] == "assistant":
            (call,) = message["tool_calls"]
            assert call["function"]["name"] in tools and isinstance(
                json.loads(call["function"]["arguments"]), dict
            )
            calls[call["id"]] = call
        else:
            assert message["role"] == "tool" and message["tool_call_id"] in calls
            assert (
                message["content"].startswith("OBSERVATION:\n")
                or "did not produce any output" in message["content"]
            )
    last = swe.request(len(swe.calls) - 1)
    marked = [m for m in last if m.get("cache_control") or isinstance(m["content"], list)]
    assert marked == [m for m in last if m["role"] in ("user", "tool")][-2:]
    assert all(isinstance(m["content"], list) for m in marked)
    views = [
        m["content"] for m in swe.messages if m["role"] == "tool" and "`cat -n` on /testbed/" in m["content"]
    ]
    assert views and all(re.search(r"\n {5}\d\t|\n {4}\d\d\t|\n {3}\d{3}\t", v) for v in views)

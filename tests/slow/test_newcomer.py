"""A newcomer's path, from the README itself: a fresh clone, the quick start's serve command, a chat
through it, and the demo. The test command (`./scripts/test.sh`) is what CI runs on a fresh clone."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.conversations import bike_shop_chat
from tests.support.processes import free_port, running

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def quick_start_commands() -> list[str]:
    """The command lines of the README's quick start (its code blocks), comments stripped."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    lines = [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh clone of what is committed: nothing installed, no venv, no stray files."""
    path = tmp_path_factory.mktemp("newcomer") / "compacting-proxy"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(path)], check=True, timeout=120)
    yield path


def test_the_quick_start_names_one_command_to_serve_and_one_to_test() -> None:
    commands = quick_start_commands()
    assert "./scripts/serve.sh" in commands
    assert "./scripts/test.sh" in commands


def test_a_fresh_clone_serves_with_the_quick_start_command(clone: Path) -> None:
    upstream_port, proxy_port = free_port(), free_port()
    stub = [sys.executable, "-m", "proxy.stub", "--port", str(upstream_port), "--window", "4000"]
    with running(stub, ready_url=f"http://127.0.0.1:{upstream_port}/v1/models"):
        [serve] = [c for c in quick_start_commands() if c.startswith("./scripts/serve.sh")]
        env = {"COMPACT_UPSTREAM_URL": f"http://127.0.0.1:{upstream_port}/v1", "COMPACT_WINDOW": "4000"}
        args = [*shlex.split(serve), "--port", str(proxy_port)]
        with running(
            ["bash", "-c", f"cd {shlex.quote(str(clone))} && exec {shlex.join(args)}"],
            ready_url=f"http://127.0.0.1:{proxy_port}/healthz",
            env=env,
            timeout=600,  # the first start installs the venv
        ):
            body = {"model": "stub", "messages": bike_shop_chat(items=120)}
            response = httpx.post(f"http://127.0.0.1:{proxy_port}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert int(response.headers["x-compaction-tokens-after"]) < int(
        response.headers["x-compaction-tokens-before"]
    )


def test_the_demo_runs_in_the_fresh_clone(clone: Path) -> None:
    demo = [c for c in quick_start_commands() if c.endswith("compacting-proxy demo")]
    assert demo, "the README shows the demo"
    if not (clone / ".venv/bin/compacting-proxy").exists():
        pytest.skip("runs after the serve test, which installs the clone's venv")
    done = subprocess.run(shlex.split(demo[0]), cwd=clone, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "->" in done.stdout and "ok" in done.stdout


def test_a_second_start_does_not_reinstall(clone: Path) -> None:
    installed = list(clone.glob(".venv/lib/python*/site-packages/compacting_proxy-*.dist-info"))
    if not installed:
        pytest.skip("runs after the serve test, which installs the clone's venv")
    before = [p.stat().st_mtime_ns for p in installed]
    done = subprocess.run(
        ["./scripts/serve.sh", "--help"], cwd=clone, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--port" in done.stdout
    after = list(clone.glob(".venv/lib/python*/site-packages/compacting_proxy-*.dist-info"))
    assert after == installed and [p.stat().st_mtime_ns for p in after] == before, "pip ran again"

"""`compacting-proxy run` with the real agent CLIs (tests/clis): each runs a short task through the
proxy `run` starts, against the scripted model server (tests/support/upstreams/agent_model.py) whose
window the loop outgrows; the proxy compacts, the server never sees a request over its window, the
CLI's exit status comes back, and the user's own config files are byte for byte what they were."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from scripts.aider_venv import binary_path as aider_binary
from tests.support.agent_clis import (
    BIN,
    CLIENTS,
    NEEDS_THE_CLIS,
    lay_out_tree,
    model_server,
    run_command,
    user_env,
)
from tests.support.processes import free_port
from tests.support.upstreams.proxy_server import proxy_command

pytestmark = [pytest.mark.cli, pytest.mark.timeout(600), NEEDS_THE_CLIS]
WINDOW = 32_000
STEPS = 16  # enough to outgrow 32k from each CLI's fixed prompt, so the proxy must compact
USER_FILES = {
    ".codex/config.toml": 'model = "gpt-5.5"\napproval_policy = "on-request"\n\n[projects."/srv/app"]\ntrust_level = "trusted"\n',
    ".codex/auth.json": '{"OPENAI_API_KEY": null}\n',
    ".config/opencode/opencode.json": '{\n  "$schema": "https://opencode.ai/config.json",\n  "theme": "tokyonight"\n}\n',
    ".claude/settings.json": '{"permissions": {"allow": ["Bash(ls:*)"]}}\n',
}


def lay_out_home(home: Path) -> dict[Path, bytes]:
    files = {}
    for name, text in USER_FILES.items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[path] = path.read_bytes()
    return files


@pytest.mark.parametrize("client", CLIENTS)
def test_run_keeps_a_cli_inside_the_window_and_the_users_files_as_they_were(
    client: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    before = lay_out_home(home)
    r, log = run_command(client, WINDOW, steps=STEPS, tell_window=False, home=home)
    explain = f"{r.row()}\nexit {r.exit_code}\n{r.output[-2000:]}\n{log[-2000:]}"
    assert r.exit_code == 0 and r.finished, explain
    assert r.over == 0 and r.orphans == 0, explain
    assert r.largest_received <= WINDOW, explain
    assert "Context optimized" in log, f"the proxy compacted the loop\n{explain}"
    assert {path: path.read_bytes() for path in before} == before


def test_run_passes_the_clis_failure_status_back(tmp_path: Path) -> None:
    """Claude Code refusing its arguments exits 1: `run` exits as it did, and stops its proxy."""
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    bad = ["-p", "hi", "--output-format", "no-such-format"]
    direct = subprocess.run([str(BIN / "claude"), *bad], env=env, capture_output=True, text=True, timeout=120)
    cmd = [*proxy_command(), "run", "claude", "--proxy", "http://127.0.0.1:9", "--", *bad]
    through = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert direct.returncode != 0
    assert through.returncode == direct.returncode, through.stderr


def path_with(cli: str) -> str:
    """A PATH on which `cli` is found: aider from its own venv (scripts/aider_venv.py, which
    scripts/test.sh runs), Gemini CLI from tests/clis, else the PATH as it is; skips without it."""
    path = os.environ.get("PATH", "/usr/bin:/bin")
    own = {"aider": aider_binary().parent, "gemini": BIN}.get(cli)
    if own is not None and (own / cli).exists():
        path = f"{own}{os.pathsep}{path}"
    if shutil.which(cli, path=path) is None:
        pytest.skip(f"{cli} is not installed (scripts/test.sh installs it)")
    return path


@pytest.mark.parametrize("cli", ["aider", "gemini"])
def test_the_real_cli_accepts_what_run_gives_it(cli: str, tmp_path: Path) -> None:
    """aider (PyPI, in its own venv) and Gemini CLI (tests/clis) start with the flags, variables and
    settings file `run` gives it (and print their version)."""
    path = path_with(cli)
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home) | {"PATH": path}
    cmd = [*proxy_command(), "run", cli, "--proxy", "http://127.0.0.1:9", "--model", "m", "--", "--version"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr


def test_real_aider_asks_through_the_proxy(tmp_path: Path) -> None:
    """aider (PyPI `aider-chat`, in its own venv): one message through the proxy `run` starts, no
    price list fetched (a metadata entry for the model), the user's `.aider.conf.yml` untouched."""
    path = path_with("aider")
    home = tmp_path / "home"
    home.mkdir()
    conf = home / ".aider.conf.yml"
    conf.write_text("dark-mode: true\n")
    tree = lay_out_tree(tmp_path)
    env = user_env(home) | {"PATH": path}
    with model_server(8_000, 3, tree, free_port(), None) as base:
        cmd = [*proxy_command(), "run", "aider", "--upstream", f"{base}/v1", "--window", "8000"]
        cmd += ["--", "--message", "say hi", "--yes-always", "--no-git", "--no-pretty", "--no-stream"]
        done = subprocess.run(
            cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
        received = httpx.get(f"{base}/_recorded", timeout=30).json()["received"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Model: openai/agent-model" in done.stdout, done.stdout
    assert [r["path"] for r in received] == ["/v1/chat/completions"]
    assert "githubusercontent" not in done.stdout + done.stderr, "no price list fetched"
    assert conf.read_text() == "dark-mode: true\n"

"""Run the real Gemini CLI (`@google/gemini-cli`, pinned by tests/clis/package-lock.json) against the
scripted Gemini API model server (tests/support/upstreams/gemini_model.py), directly or through the
real `compacting-proxy` process, or through the proxy's Gemini bridge to any Chat Completions server.

The CLI runs as a user would point it elsewhere (FACTS.md, Gemini CLI 0.61): `GOOGLE_GEMINI_BASE_URL`
(the server's root: the CLI adds `/v1beta/models/...`), `GEMINI_API_KEY` (sent as `x-goog-api-key`),
and in a fresh `$HOME/.gemini/settings.json` `security.auth.selectedType: "gemini-api-key"` (without
it `-p` fails "Invalid auth method selected"), usage statistics, telemetry and update checks off;
`GEMINI_CLI_TRUST_WORKSPACE=true` (a headless run in an untrusted folder stops at once) and
`gemini -p TASK -m MODEL --yolo` (every tool call approved).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agent_clis import BIN, CLIS, TASK, lay_out_tree
from tests.support.processes import free_port, serving
from tests.support.upstreams.agent_model import DONE_MARK
from tests.support.upstreams.proxy_server import running_proxy

GEMINI = BIN / "gemini"
API_KEY = "gemini-test-key-5d1e"


def installed() -> bool:
    return GEMINI.exists()


# Skipped by hand without it; in CI (which installs it) its absence is a failure, not a skip.
NEEDS_GEMINI_CLI = pytest.mark.skipif(
    not installed() and os.environ.get("CI") != "true",
    reason="Gemini CLI is not installed: npm install --prefix tests/clis (scripts/test.sh does)",
)


def version() -> str:
    package = CLIS / "node_modules" / "@google" / "gemini-cli" / "package.json"
    return str(json.loads(package.read_text())["version"])


@dataclass(frozen=True)
class GeminiRun:
    exit_code: int
    output: str
    received: list[dict[str, Any]]  # what the model server recorded, one entry per request

    @property
    def finished(self) -> bool:
        return self.exit_code == 0 and DONE_MARK in self.output

    @property
    def over(self) -> int:
        return sum(1 for r in self.received if r["over"])

    @property
    def orphans(self) -> int:
        return sum(r["orphans"] for r in self.received)

    def explain(self) -> str:
        seen = [(r.get("kind"), r["tokens"], r["over"], r["orphans"]) for r in self.received]
        return f"exit {self.exit_code}; requests (kind, tokens, over, orphans): {seen[-12:]}\n{self.output[-2000:]}"


def settings(home: Path, extra: dict[str, Any] | None = None) -> None:
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        **(extra or {}),
    }
    (folder / "settings.json").write_text(json.dumps(config))


def run_cli(
    base: str,
    model: str,
    tree: Path,
    home: Path,
    timeout: float,
    *,
    small: bool = False,
) -> tuple[int, str]:
    """`gemini -p` to its end; `small`: as a user sets it up for a small local model, with a short
    system prompt (`GEMINI_SYSTEM_MD`) and two core tools (`tools.core`)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TERM": "dumb",
        "GOOGLE_GEMINI_BASE_URL": base,
        "GEMINI_API_KEY": API_KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    extra: dict[str, Any] = {}
    if small:
        system = home / "system.md"
        home.mkdir(parents=True, exist_ok=True)
        system.write_text("You are a coding agent. Use the tools to read files, then answer briefly.\n")
        env["GEMINI_SYSTEM_MD"] = str(system)
        extra = {"tools": {"core": ["read_file", "run_shell_command"]}}
    settings(home, extra)
    cmd = [str(GEMINI), "-p", TASK, "-m", model, "--yolo"]
    try:
        done = subprocess.run(
            cmd, cwd=tree, env=env, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        return -1, out.decode(errors="replace")
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")


@contextmanager
def gemini_model(window: int, steps: int, tree: Path) -> Iterator[str]:
    port = free_port()
    log_path = tree.parent / f"gemini-model-{port}.log"
    cmd = [sys.executable, "-m", "tests.support.upstreams.gemini_model", "--port", str(port)]
    cmd += ["--window", str(window), "--steps", str(steps), "--tree", str(tree)]
    with serving(cmd, port, log_path, name="gemini model") as base:
        yield base


def run(window: int, *, proxied: bool, steps: int = 30, timeout: float = 400) -> GeminiRun:
    """One Gemini CLI session against the scripted Gemini API server, through the proxy or not."""
    with tempfile.TemporaryDirectory(prefix="agent-gemini-") as tmp:
        tree = lay_out_tree(Path(tmp))
        home = Path(tmp) / "home"
        with gemini_model(window, steps, tree) as server:
            if proxied:
                # The window as the proxy finds it: the model's `inputTokenLimit`.
                with running_proxy(server, "auto", gemini_upstream="native") as proxy:
                    code, output = run_cli(proxy.base_url, "gemini-2.5-flash", tree, home, timeout)
                    output += "\n--- proxy log ---\n" + proxy.log_tail(20)
            else:
                code, output = run_cli(server, "gemini-2.5-flash", tree, home, timeout)
            received = httpx.get(f"{server}/_recorded").json()
    return GeminiRun(code, output, received)

"""Run a real agent CLI (from npm, pinned by tests/clis/package-lock.json) against the scripted model
server (tests/support/upstreams/agent_model.py), directly or through the real ``compacting-proxy`` process,
and summarise what the server received.

Each CLI runs non-interactively, in a fresh home, with telemetry, update checks and every other
non-essential call off, pointed at the server by the variables or config file a user would write:

- Claude Code: ``ANTHROPIC_BASE_URL=http://proxy`` (no ``/v1``) and ``ANTHROPIC_API_KEY``;
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (+ ``DISABLE_TELEMETRY``, ``DISABLE_AUTOUPDATER``,
  ``DISABLE_ERROR_REPORTING``); ``claude -p TASK --output-format json --allowedTools Read,Bash,Grep,Glob``
  (``--dangerously-skip-permissions`` is refused as root). Thinking is on by default for the model;
  ``MAX_THINKING_TOKENS=0`` turns it off where the model allows it (2.1.332: ``claude-sonnet-4-5``,
  the model here, yes; ``claude-opus-5-5`` no, it still gets adaptive thinking).
- Codex with its built-in ``openai`` provider (``codex_compact_limit``): ``openai_base_url =
  "http://proxy/v1"``, a model of its catalogue and ``model_auto_compact_token_limit``, ``OPENAI_API_KEY``:
  it compacts remotely (a ``compaction_trigger`` item), which the proxy answers.
- Codex: ``$CODEX_HOME/config.toml`` with ``model_provider`` naming a ``[model_providers.x]`` table:
  ``base_url = "http://proxy/v1"``, ``wire_api = "responses"``, ``env_key``; ``check_for_update_on_startup
  = false``, ``[analytics] enabled = false``; ``codex exec --skip-git-repo-check
  --dangerously-bypass-approvals-and-sandbox TASK``.
- opencode: ``OPENCODE_CONFIG=opencode.json`` with a provider ``{"npm": "@ai-sdk/openai-compatible",
  "options": {"baseURL": "http://proxy/v1"}, "models": {...: {"limit": {"context": W}}}}`` (the AI
  SDK package is bundled in the binary: nothing is fetched); ``OPENCODE_DISABLE_AUTOUPDATE``,
  ``_MODELS_FETCH``, ``_LSP_DOWNLOAD``, ``_SHARE``, ``_DEFAULT_PLUGINS``, ``_CLAUDE_CODE``,
  ``OPENCODE_PERMISSION='{"*": "allow"}'``; ``opencode run TASK``; and ``OPENCODE_DISABLE_AUTOCOMPACT=1``
  unless ``own_compaction``: opencode's own summary request carries the whole history in one user
  message, which no compaction may cut, and at 16k its trigger (``limit.context - limit.output``)
  sits below the proxy's line, so behind the proxy it fires and is refused (see README).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import free_port, serving
from tests.support.upstreams.agent_model import DONE_MARK, TASK_MARK
from tests.support.upstreams.proxy_server import running_proxy

ROOT = Path(__file__).resolve().parents[2]
CLIS = ROOT / "tests" / "clis"
BIN = CLIS / "node_modules" / ".bin"
TASK = (
    f"{TASK_MARK}: survey the Python package in this directory: read its modules, grep for its "
    f"classes and entry points, and when you are done answer with {DONE_MARK}."
)
CLIENTS = ("claude", "codex", "opencode")
MODEL = {"claude": "claude-sonnet-4-5", "codex": "agent-model", "opencode": "agent-model"}
CODEX_KNOWN_MODEL = "gpt-5.1-codex"  # in Codex's own catalogue: its built-in provider compacts remotely
CODEX_EXEC = ("exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox")


def installed(client: str) -> bool:
    return (BIN / client).exists()


# Skipped by hand without them; in CI (which installs them) their absence is a failure, not a skip.
NEEDS_THE_CLIS = pytest.mark.skipif(
    not all(installed(c) for c in CLIENTS) and os.environ.get("CI") != "true",
    reason="the CLIs are not installed: npm install --prefix tests/clis (scripts/test.sh does)",
)


def run_cli(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run an agent CLI to its end (stdin closed): its exit status and its output, or -1 and what it
    printed when it ran out of time."""
    try:
        done = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as expired:
        return -1, f"timed out after {timeout} s\n{expired.stdout or ''}"
    return done.returncode, done.stdout + done.stderr


def version(client: str) -> str:
    package = {
        "claude": "@anthropic-ai/claude-code",
        "codex": "@openai/codex",
        "opencode": "opencode-ai",
        "gemini": "@google/gemini-cli",
    }[client]
    return str(json.loads((CLIS / "node_modules" / package / "package.json").read_text())["version"])


def lay_out_tree(where: Path) -> Path:
    """A real source tree to work on: httpx's own package, copied from this venv."""
    source = Path(httpx.__file__).parent
    tree = where / "work"
    shutil.copytree(source, tree / "httpx", ignore=shutil.ignore_patterns("__pycache__"))
    return tree


@dataclass(frozen=True)
class Run:
    client: str
    version: str
    window: int
    proxied: bool
    thinking: bool
    requests: int  # model requests the server received
    over: int  # of them over the window
    finished: bool  # the CLI printed the final answer and exited 0
    orphans: int  # tool results without their call, over all requests received
    largest_sent: int  # cl100k tokens, by the client
    largest_received: int  # cl100k tokens, by the server
    compaction_s: float  # total time from the tap to the server, proxied runs
    compaction_max_s: float
    system_intact: bool  # every received request has the system prompt the client sent
    task_intact: bool  # every main-loop request received still carries the user's task
    client_errors: int  # 4xx answers the client got
    exit_code: int
    output: str
    steps: int
    seconds: float
    recorded: dict[str, Any]
    sent_bodies: dict[str, Any]  # tap id -> the body the client sent (proxied runs)
    prefix_kept: float = 0.0  # of the bytes of main-loop requests, the share unchanged from the one before
    received_tokens: int = 0  # cl100k tokens of every request the server received, summed

    def row(self) -> str:
        route = "proxy" if self.proxied else "direct"
        name = self.client + (" (thinking)" if self.thinking else "")
        return (
            f"| {name} | {self.version} | {self.window // 1000}k | {route} | {self.requests} | {self.over} | "
            f"{'yes' if self.finished else 'no'} | {self.largest_sent:,} | {self.largest_received:,} | "
            f"{self.compaction_s:.2f} s (max {self.compaction_max_s * 1000:.0f} ms) |"
        )


def claude_result(output: str) -> dict[str, Any]:
    """The result object `claude -p --output-format json` prints (its last JSON line)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and value.get("type") == "result":
                return value
    return {}


@contextmanager
def model_server(
    window: int, steps: int, tree: Path, port: int, tap_to: str | None, strict: bool = False
) -> Iterator[str]:
    log_path = tree.parent / f"agent-model-{port}.log"
    cmd = [
        sys.executable,
        "-m",
        *(
            ("tests.support.upstreams.strict", "--agent")
            if strict
            else ("tests.support.upstreams.agent_model",)
        ),
        "--port",
        str(port),
        "--window",
        str(window),
        "--steps",
        str(steps),
        "--tree",
        str(tree),
    ]
    if tap_to:
        cmd += ["--tap-to", tap_to]
    with serving(cmd, port, log_path, name="agent model") as base:
        yield base


def home_of_its_own(home: Path) -> dict[str, str]:
    """`HOME` and the XDG folders in it, where a CLI keeps its settings, sessions and caches."""
    folders = {"CONFIG": ".config", "DATA": ".local/share", "CACHE": ".cache", "STATE": ".local/state"}
    return {"HOME": str(home)} | {f"XDG_{kind}_HOME": str(home / at) for kind, at in folders.items()}


# What each CLI is told to leave off: its calls home, its updates, its own extras.
CLAUDE_OFF = (
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "DISABLE_ERROR_REPORTING",
)
OPENCODE_OFF = tuple(
    f"OPENCODE_DISABLE_{what}"
    for what in ("AUTOUPDATE", "MODELS_FETCH", "LSP_DOWNLOAD", "SHARE", "DEFAULT_PLUGINS", "CLAUDE_CODE")
)


def client_command(
    client: str,
    base: str,
    window: int,
    home: Path,
    thinking: bool,
    own_compaction: bool = False,
    codex_compact_limit: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that point `client` at `base` (the server or the proxy).
    `codex_compact_limit`: Codex with its built-in `openai` provider instead (a model it knows,
    `openai_base_url`), compacting remotely at that many tokens."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "dumb", **home_of_its_own(home)}
    if client == "claude":
        env |= {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": "sk-ant-test"}
        env |= dict.fromkeys(CLAUDE_OFF, "1")
        if not thinking:
            env["MAX_THINKING_TOKENS"] = "0"
        cmd = [
            str(BIN / "claude"),
            "-p",
            TASK,
            "--output-format",
            "json",
            "--model",
            MODEL[client],
            "--allowedTools",
            "Read,Bash,Grep,Glob",
        ]
        return cmd, env
    if client == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        if codex_compact_limit is not None:
            (codex_home / "config.toml").write_text(
                f'model = "{CODEX_KNOWN_MODEL}"\nopenai_base_url = "{base}/v1"\n'
                f"model_auto_compact_token_limit = {codex_compact_limit}\n"
                "check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n"
            )
            env |= {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-test"}
            return [str(BIN / "codex"), *CODEX_EXEC, TASK], env
        (codex_home / "config.toml").write_text(
            f'model = "{MODEL[client]}"\nmodel_provider = "agentmodel"\ncheck_for_update_on_startup = false\n\n'
            f'[model_providers.agentmodel]\nname = "agent model"\nbase_url = "{base}/v1"\n'
            f'wire_api = "responses"\nenv_key = "AGENT_MODEL_KEY"\n\n[analytics]\nenabled = false\n'
        )
        env |= {"CODEX_HOME": str(codex_home), "AGENT_MODEL_KEY": "sk-test"}
        cmd = [
            str(BIN / "codex"),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            TASK,
        ]
        return cmd, env
    if client == "opencode":
        config = home / "opencode.json"
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "agent model",
            "options": {"baseURL": f"{base}/v1", "apiKey": "sk-test"},
            "models": {MODEL[client]: {"name": "agent model", "limit": {"context": window, "output": 4096}}},
        }
        config.write_text(
            json.dumps(
                {
                    "$schema": "https://opencode.ai/config.json",
                    "model": f"agentmodel/{MODEL[client]}",
                    "autoupdate": False,
                    "share": "disabled",
                    "provider": {"agentmodel": provider},
                }
            )
        )
        env |= {"OPENCODE_CONFIG": str(config), "OPENCODE_PERMISSION": '{"*": "allow"}'}
        env |= dict.fromkeys(OPENCODE_OFF, "1")
        if not own_compaction:
            env["OPENCODE_DISABLE_AUTOCOMPACT"] = "1"
        return [str(BIN / "opencode"), "run", TASK], env
    raise ValueError(client)


def run(
    client: str,
    window: int,
    *,
    proxied: bool,
    steps: int = 60,
    thinking: bool = False,
    timeout: float = 600,
    proxy_settings: dict[str, str] | None = None,
    own_compaction: bool = False,
    codex_compact_limit: int | None = None,
    strict: bool = False,
) -> Run:
    """One CLI session to its end (or to `timeout`), and what the server saw. `strict`: the server
    refuses fields it does not know (`tests.support.upstreams.strict`)."""
    with tempfile.TemporaryDirectory(prefix=f"agent-{client}-") as tmp:
        tree = lay_out_tree(Path(tmp))
        home = Path(tmp) / "home"
        home.mkdir()
        port = free_port()
        started = time.monotonic()
        with (
            contextlib_proxy(
                proxied, f"http://127.0.0.1:{port}/v1", window, proxy_settings or {}
            ) as proxy_url,
            model_server(window, steps, tree, port, proxy_url, strict) as base,
        ):
            cmd, env = client_command(
                client,
                f"{base}/tap" if proxied else base,
                window,
                home,
                thinking,
                own_compaction,
                codex_compact_limit,
            )
            code, output = run_cli(cmd, tree, env, timeout)
            recorded = httpx.get(f"{base}/_recorded", timeout=30).json()
            sent = httpx.get(f"{base}/_sent", timeout=60).json() if proxied else {}
        seconds = time.monotonic() - started
        return summarise(client, window, proxied, thinking, steps, code, output, recorded, sent, seconds)


@contextmanager
def contextlib_proxy(
    proxied: bool, upstream: str, window: int, settings: dict[str, str]
) -> Iterator[str | None]:
    if not proxied:
        yield None
        return
    with running_proxy(upstream, window, **settings) as proxy:
        yield proxy.base_url


def summarise(
    client: str,
    window: int,
    proxied: bool,
    thinking: bool,
    steps: int,
    code: int,
    output: str,
    recorded: dict[str, Any],
    sent_bodies: dict[str, Any],
    seconds: float,
) -> Run:
    from tests.support.upstreams.agent_model import system_digest

    received = recorded["received"]
    sent = recorded["sent"]
    main = [r for r in received if r["kind"] in ("tools", "final")]
    delays = [r["at"] - sent[r["tap"]]["at"] for r in received if r.get("tap") in sent]
    system_ok = all(
        r["system"] == system_digest(r["format"], sent_bodies[r["tap"]])
        for r in received
        if r.get("tap") in sent_bodies
    )
    answered = any(r["kind"] == "final" for r in received)
    errors = (
        [s for s in sent.values() if 400 <= s.get("status", 200) < 500]
        if proxied
        else [r for r in received if r["over"] or r["orphans"]]
    )
    return Run(
        client=client,
        version=version(client),
        window=window,
        proxied=proxied,
        thinking=thinking,
        requests=len(received),
        over=sum(r["over"] for r in received),
        finished=code == 0 and answered and DONE_MARK in output,
        orphans=sum(r["orphans"] for r in received),
        largest_sent=max([s["tokens"] for s in sent.values()] or [r["tokens"] for r in received] or [0]),
        largest_received=max([r["tokens"] for r in received] or [0]),
        compaction_s=sum(delays),
        compaction_max_s=max(delays or [0.0]),
        system_intact=system_ok,
        task_intact=all(r["has_task"] for r in main),
        client_errors=len(errors),
        exit_code=code,
        output=output[-3000:],
        steps=steps,
        seconds=seconds,
        recorded=recorded,
        sent_bodies=sent_bodies,
        prefix_kept=prefix_kept(received),
        received_tokens=sum(r["tokens"] for r in received),
    )


def prefix_kept(received: list[dict[str, Any]]) -> float:
    main = [r for r in received if r["kind"] in ("tools", "final")][1:]
    total = sum(r.get("bytes", 0) for r in main)
    return sum(r.get("prefix_bytes", 0) for r in main) / total if total else 0.0


# `compacting-proxy run <client> -- ARGS`: the CLI's own arguments for the task, and the variables a
# user of these tests sets that `run` leaves alone (permissions, thinking, plugins).
RUN_ARGS = {
    "claude": ["-p", TASK, "--output-format", "json", "--allowedTools", "Read,Bash,Grep,Glob"],
    "codex": ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", TASK],
    "opencode": ["run", TASK],
    "gemini": ["-p", TASK, "--yolo"],
}
RUN_ENV = {
    "claude": {"MAX_THINKING_TOKENS": "0"},
    "codex": {},
    "opencode": {
        "OPENCODE_PERMISSION": '{"*": "allow"}',
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    },
    "gemini": {"GEMINI_CLI_TRUST_WORKSPACE": "true"},  # a headless run in a new folder
}
RUN_MODEL = "agent-model"


def user_env(home: Path) -> dict[str, str]:
    """A user's environment with a home of its own and the CLIs of tests/clis on the PATH (and the
    PYTHONPATH that puts the tree under test before the installed one, when the tests have one)."""
    tree = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    return tree | {
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "TERM": "dumb",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
    }


def run_command(
    client: str,
    window: int,
    *,
    steps: int,
    tell_window: bool,
    home: Path | None = None,
    own_proxy: bool = True,
    timeout: float = 600,
    strict: bool = False,
    env: dict[str, str] | None = None,
) -> tuple[Run, str]:
    """One session started with `compacting-proxy run CLIENT` against the scripted server; the run
    and the proxy's log. With `own_proxy`, `run` starts its proxy itself (`--upstream`, `--window`);
    else a proxy is started here and `run --proxy` points the CLI at the server's tap in front of it,
    which records what the CLI sent. `strict`: the server refuses what strict servers refuse
    (`tests.support.upstreams.strict`); `env`: more of the user's variables."""
    from tests.support.upstreams.proxy_server import proxy_command

    with tempfile.TemporaryDirectory(prefix=f"agent-run-{client}-") as tmp:
        tree = lay_out_tree(Path(tmp))
        if home is None:
            home = Path(tmp) / "home"
            home.mkdir()
        log = Path(tmp) / "proxy.log"
        port = free_port()
        started = time.monotonic()
        with (
            contextlib_proxy(not own_proxy, f"http://127.0.0.1:{port}/v1", window, {}) as proxy_url,
            model_server(window, steps, tree, port, proxy_url, strict) as base,
        ):
            options = ["--model", RUN_MODEL, "--tell-window" if tell_window else "--no-tell-window"]
            if own_proxy:
                options += ["--upstream", f"{base}/v1", "--window", str(window), "--log", str(log)]
            else:
                options += ["--proxy", f"{base}/tap"]
            cmd = [*proxy_command(), "run", client, *options, "--", *RUN_ARGS[client]]
            code, output = run_cli(cmd, tree, user_env(home) | RUN_ENV[client] | (env or {}), timeout)
            recorded = httpx.get(f"{base}/_recorded", timeout=30).json()
            sent_bodies = httpx.get(f"{base}/_sent", timeout=60).json() if not own_proxy else {}
        proxy_log = log.read_text(errors="replace") if log.exists() else ""
        result = summarise(
            client,
            window,
            True,
            False,
            steps,
            code,
            output,
            recorded,
            sent_bodies,
            time.monotonic() - started,
        )
        return result, proxy_log

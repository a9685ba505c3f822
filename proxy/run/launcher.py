"""`compacting-proxy run <cli>`: a proxy for one agent CLI session, and the CLI pointed at it.

The proxy is a child process (`python -m proxy` on a free loopback port) in a session of its own, so
the terminal's Ctrl-C reaches the CLI (which shares our process group and the terminal) and never
the proxy under it; its log goes to a file, never over the CLI's screen. While the CLI runs, this
process ignores SIGINT and SIGQUIT as a shell does for its foreground job and passes SIGTERM and
SIGHUP on to the CLI. When the CLI exits the proxy is stopped (SIGTERM, then SIGKILL) and its exit
status is ours: a signal death as 128 + the signal's number, as shells report it.

The proxy answers only its CLI: it starts with a key of its own (random, `COMPACT_API_KEYS`, handed
over in the environment, never on a command line another user can read in `ps`), which the CLI gets
in place of its own (`proxy.run.agents`). The user's key for the upstream, if the CLI had one, goes
to the proxy as `COMPACT_UPSTREAM_API_KEY` unless the user configured one already.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from dotenv import dotenv_values  # pydantic-settings' own reader of `.env` files

from proxy.counting.tokens import token_count
from proxy.run.agents import VENDOR_MODELS, Target, default_model, launch, upstream_key
from proxy.settings import Settings

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGHUP)
IGNORED = (signal.SIGINT, signal.SIGQUIT)


class RunError(Exception):
    """Something the user can fix, said in one line (no proxy, no CLI, no model)."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    cli: str
    args: list[str]
    proxy: str | None = None  # a running proxy to use instead of starting one
    model: str | None = None
    window: str | None = None  # COMPACT_WINDOW for the child proxy, a number or `auto`
    upstream: str | None = None  # COMPACT_UPSTREAM_URL for the child proxy
    tell_window: bool = False
    port: int | None = None
    env_file: str | None = None
    log: str | None = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def say(message: str) -> None:
    print(f"compacting-proxy: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Proxy:
    """The proxy a session talks to: its base URL, and its key when `run` started it."""

    url: str
    key: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"} if self.key else {}


def proxy_setting(name: str, options: RunOptions, env: Mapping[str, str]) -> str | None:
    """A `COMPACT_*` setting as the child proxy reads it: its environment, else its settings file."""
    if env.get(name):
        return env[name]
    env_file = Path(options.env_file or ".env")
    return (dotenv_values(env_file).get(name) or None) if env_file.is_file() else None


def proxy_environment(options: RunOptions, environ: Mapping[str, str], key: str) -> dict[str, str]:
    """The child proxy's environment: the user's, with its own key, the CLI's upstream key (unless
    one is configured), and for Gemini CLI the model every bridged call goes to."""
    env = dict(environ)
    env["COMPACT_API_KEYS"] = key
    user_key = upstream_key(options.cli, environ)
    if user_key and not proxy_setting("COMPACT_UPSTREAM_API_KEY", options, environ):
        env["COMPACT_UPSTREAM_API_KEY"] = user_key
    if options.upstream:
        env["COMPACT_UPSTREAM_URL"] = options.upstream
    if options.window:
        env["COMPACT_WINDOW"] = options.window
    if options.cli == "gemini" and options.model:
        # Its own side calls (the loop check, summaries) name Google's models whatever `-m` says.
        env["COMPACT_GEMINI_MODEL"] = options.model
    return env


def upstream_models(options: RunOptions, environ: Mapping[str, str]) -> list[str]:
    """What the upstream the child proxy will use lists, asked before it starts (for Gemini CLI,
    whose model the proxy must know from the start)."""
    env = proxy_environment(options, environ, "")
    url = proxy_setting("COMPACT_UPSTREAM_URL", options, env) or Settings.model_fields["upstream_url"].default
    key = proxy_setting("COMPACT_UPSTREAM_API_KEY", options, env)
    return listed_models(Proxy(str(url).rstrip("/"), key), "/models")


@contextmanager
def child_proxy(options: RunOptions, environ: Mapping[str, str]) -> Iterator[Proxy]:
    """A `compacting-proxy` process on loopback for this session, with a key of its own."""
    port = options.port or free_port()
    key = secrets.token_urlsafe(24)
    env = proxy_environment(options, environ, key)
    cmd = [sys.executable, "-m", "proxy", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--timeout-graceful-shutdown", "3"]
    if options.env_file:
        cmd += ["--env-file", options.env_file]
    if options.log:
        log_path = Path(options.log)
    else:
        fd, name = tempfile.mkstemp(prefix="compacting-proxy-run-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, process, log_path)
        say(f"proxy on {base} (log: {log_path})")
        yield Proxy(base, key)
    finally:
        _stop(process)


def _die_with_parent() -> None:
    """In the proxy child, before exec: SIGTERM when `run` dies, even by SIGKILL, so that no proxy
    outlives its session (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _wait_healthy(base: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(base_url=base, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RunError(f"the proxy exited with status {process.returncode} at start:\n{tail}")
            try:
                if client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise RunError(f"the proxy did not answer /healthz within {START_TIMEOUT_S:.0f} s (log: {log_path})")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def proxy_for(options: RunOptions, environ: Mapping[str, str]) -> Iterator[Proxy]:
    if options.proxy:
        base = options.proxy.rstrip("/")
        try:
            httpx.get(f"{base}/healthz", timeout=5).raise_for_status()
        except httpx.HTTPError as exc:
            say(f"no answer from {base}/healthz ({exc.__class__.__name__}); starting the CLI anyway")
        yield Proxy(base)
    else:
        with child_proxy(options, environ) as proxy:
            yield proxy


def listed_models(proxy: Proxy, path: str = "/v1/models") -> list[str]:
    """The models the upstream lists at `/v1/models` (forwarded by the proxy), or none."""
    try:
        listed = httpx.get(f"{proxy.url}{path}", headers=proxy.headers, timeout=30).json()
        return [str(m["id"]) for m in listed["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []


def choose_model(cli: str, listed: list[str], where: str = "the upstream") -> str | None:
    model = default_model(cli, listed)
    if model is None and cli not in VENDOR_MODELS:
        raise RunError(f"no --model given and {where}/v1/models lists none: name one with --model")
    if model is not None:
        say(f"model {model} (the first the upstream lists; --model chooses another)")
    return model


def compacted_window(proxy: Proxy, model: str) -> int | None:
    """The window the proxy compacts `model`'s chats for (its `/compact` dry run's report)."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "window?"}]}
    try:
        answer = httpx.post(f"{proxy.url}/compact", json=body, headers=proxy.headers, timeout=30)
        window = answer.json()["report"]["window"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    return token_count(window)


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run_cli(argv: list[str], env: Mapping[str, str]) -> int:
    """Run the CLI on this terminal to its end; its exit status, shell style."""
    child = subprocess.Popen(argv, env=dict(env))

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    saved = {s: signal.signal(s, signal.SIG_IGN) for s in IGNORED}
    saved |= {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        return exit_status(child.wait())
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def run(options: RunOptions, environ: Mapping[str, str] | None = None) -> int:
    """The whole command: proxy up, CLI run, proxy down; the CLI's exit status."""
    environ = dict(os.environ if environ is None else environ)
    program = shutil.which(options.cli, path=environ.get("PATH"))
    if program is None:
        raise RunError(f"{options.cli} is not on the PATH")
    if options.cli == "gemini" and not (options.model or options.proxy):
        options = replace(options, model=choose_model(options.cli, upstream_models(options, environ)))
    with (
        proxy_for(options, environ) as proxy,
        tempfile.TemporaryDirectory(prefix="compacting-proxy-run-") as tmp,
    ):
        model = options.model or choose_model(options.cli, listed_models(proxy), proxy.url)
        window = None
        if options.tell_window and model is not None:
            window = compacted_window(proxy, model)
            if window is None and options.window and options.window.isdigit():
                window = int(options.window)
        target = Target(proxy.url, model, window, proxy.key)
        plan = launch(options.cli, options.args, target, Path(tmp), environ)
        page = f"watch it at {proxy.url}/ui"
        say(f"{page} (the page asks for this session's key: {proxy.key})" if proxy.key else page)
        if window:
            say(f"{options.cli} is told the window: {window:,} tokens")
        try:
            return run_cli([program, *plan.argv[1:]], plan.environment(environ))
        finally:
            if plan.finish is not None:
                plan.finish()

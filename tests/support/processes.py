"""Real processes on loopback for tests and benchmarks: a free port, start, a bounded wait for
health (failing early, with the log, if the process exits), a clean stop."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

VENV_BIN = Path(sys.executable).parent
# The checkout under test: first on every child's path, so `python -m tests.support...` runs from the
# empty directory each test works in, and a child imports this tree's `proxy`.
ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 5.0


def child_environment() -> dict[str, str]:
    """This process's environment for a child: no `COMPACT_*` setting of the host's, and this
    checkout first on `PYTHONPATH`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


class ServerStartError(RuntimeError):
    """A test server died or never became healthy; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running(
    args: list[str], *, ready_url: str, env: dict[str, str] | None = None, timeout: float = 30
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `args`, wait until `ready_url` answers 200, and stop the process afterwards."""
    clean = child_environment()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"proc-{os.getpid()}-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(args, env={**clean, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(ready_url, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} was not ready after {timeout}s:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        process.log_path = log  # type: ignore[attr-defined]
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_healthy(
    base_url: str, path: str, process: subprocess.Popen[bytes], log_path: Path, *, timeout: float, name: str
) -> None:
    """Poll ``base_url + path`` until it answers 200; fail early, with the log, if the process exits."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=base_url, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServerStartError(
                    f"{name} exited with {process.returncode} during startup; log tail:\n{log_tail(log_path)}"
                )
            try:
                if client.get(path).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    stop(process)
    raise ServerStartError(f"{name} not healthy after {timeout:.0f} s; log tail:\n{log_tail(log_path)}")


@contextmanager
def started(
    cmd: list[str],
    *,
    port: int,
    health: str,
    log_path: Path,
    name: str,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    timeout: float = 30,
) -> Iterator[subprocess.Popen[bytes]]:
    """`cmd`, a server on `port` with its output in `log_path`, until the block ends: yielded once
    `health` answers 200 (failing early, with the log, if it exits first), stopped after, and the
    log's tail printed (in the failing test's output) if it ended otherwise than stopped."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", health, process, log_path, timeout=timeout, name=name)
        yield process
    finally:
        stop(process)
        if process.returncode not in (0, -15):
            print(log_tail(log_path))


@contextmanager
def running_module(module: str, *args: str, ready: str = "/v1/models") -> Iterator[str]:
    """`python -m <module> --port P <args>` (a fake upstream of `tests.support.upstreams`) on a free
    port until the block ends; yields its root URL once `ready` answers 200."""
    port = free_port()
    command = [sys.executable, "-m", module, "--port", str(port), *args]
    with running(command, ready_url=f"http://127.0.0.1:{port}{ready}"):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def serving(cmd: list[str], port: int, log_path: Path, *, name: str) -> Iterator[str]:
    """`cmd`, run from the repository's root, until the block ends: yields its base URL once its
    `/healthz` answers."""
    with started(cmd, port=port, health="/healthz", log_path=log_path, name=name):
        yield f"http://127.0.0.1:{port}"


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate, and kill if it has not exited within a few seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"

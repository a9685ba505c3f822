"""Child server processes for tests: a free loopback port, a bounded wait for health, a clean stop."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx

STOP_TIMEOUT_S = 5.0


class ServerStartError(RuntimeError):
    """A test server died or never became healthy; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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

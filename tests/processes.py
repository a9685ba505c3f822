"""Real processes on loopback for end-to-end tests: free ports, start, wait until ready, stop."""

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
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
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

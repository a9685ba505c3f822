from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import httpx
import pytest

from tests.support.processes import VENV_BIN, free_port

pytestmark = pytest.mark.process  # runs the real compacting-proxy command


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
    return subprocess.run(
        [str(VENV_BIN / "compacting-proxy"), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_invalid_settings_fail_at_start_up_naming_the_variable() -> None:
    result = run("--port", "1", COMPACT_THRESHOLD="2", COMPACT_MODEL_WINDOWS="x")
    assert result.returncode == 2
    assert "COMPACT_THRESHOLD" in result.stderr and "COMPACT_MODEL_WINDOWS" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_options() -> None:
    result = run("--help")
    assert result.returncode == 0
    for option in ("--host", "--port", "--workers", "--log-level", "demo"):
        assert option in result.stdout


def test_python_dash_m_works() -> None:
    result = subprocess.run([sys.executable, "-m", "proxy", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("compacting-proxy ")


def test_demo_replays_a_long_chat() -> None:
    result = run("demo", "--turns", "8")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("->" in line for line in lines), result.stdout
    assert all(line.rstrip().endswith("ok") for line in lines if line[:4].strip().isdigit())


def test_an_unloadable_tokenizer_fails_at_start_up() -> None:
    result = run("--port", "1", COMPACT_TOKENIZER="hf:/nonexistent/tokenizer.json")
    assert result.returncode == 2
    assert "COMPACT_TOKENIZER" in result.stderr and "Traceback" not in result.stderr


def test_on_a_terminal_the_access_line_is_plain_text() -> None:
    """Run in a terminal (a laptop's), each request's access line reads as text: no colour codes,
    which the one-line escaping printed as `\\x1b[1m...\\x1b[0m` around the request line."""
    port = free_port()
    leader, follower = pty.openpty()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
    process = subprocess.Popen(
        [str(VENV_BIN / "compacting-proxy"), "--host", "127.0.0.1", "--port", str(port)],
        env={**clean, "COMPACT_UPSTREAM_URL": "http://127.0.0.1:1/v1", "TERM": "xterm-256color"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    try:
        url = f"http://127.0.0.1:{port}/healthz?key=secret"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.05)
        seen = b""
        while b"/healthz" not in seen.split(b" access ")[-1] and time.monotonic() < deadline:
            if select.select([leader], [], [], 1)[0]:
                seen += os.read(leader, 65536)
    finally:
        process.terminate()
        process.wait(timeout=10)
        os.close(leader)
    line = next(line for line in seen.decode().splitlines() if " access " in line)
    assert '"GET /healthz?key=*** HTTP/1.1" 200 OK' in line, line
    assert "\x1b" not in line and "\\x1b" not in line, line

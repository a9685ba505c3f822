from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import VENV_BIN

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

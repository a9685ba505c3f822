"""Pytest plugin (loaded from ``tests/conftest.py``): the recording upstream that speaks every
compacted format (``tests.support.upstreams.formats``) and the real proxy process in front of it, one each
per module, and what the upstream received."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import VENV_BIN, free_port, running

FAKE = Path(__file__).parent / "upstreams" / "formats.py"

WINDOW = 4000  # the upstream's, and the proxy's for the model "small"
API_KEY = "proxy-key"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    port = free_port()
    args = [sys.executable, str(FAKE), "--port", str(port), "--window", str(WINDOW)]
    with running(args, ready_url=f"http://127.0.0.1:{port}/v1/models"):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def running_proxy(upstream: str, **env: str) -> Iterator[str]:
    port = free_port()
    settings = {
        "COMPACT_UPSTREAM_URL": f"{upstream}/v1",
        "COMPACT_WINDOW": "100000",  # only the model (or deployment) "small" has a small window
        "COMPACT_MODELS": json.dumps({"small": {"window": WINDOW}}),
        **env,
    }
    args = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--log-level", "warning"]
    with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env=settings):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def proxy(upstream: str) -> Iterator[str]:
    with running_proxy(upstream) as url:
        yield url


@pytest.fixture(scope="module")
def locked_proxy(upstream: str) -> Iterator[str]:
    """The proxy with its own API keys (COMPACT_API_KEYS)."""
    with running_proxy(upstream, COMPACT_API_KEYS=API_KEY) as url:
        yield url


@pytest.fixture
def fresh_record(upstream: str) -> None:
    """The upstream's record cleared before the test."""
    httpx.delete(f"{upstream}/_recorded")


def recorded(upstream: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = httpx.get(f"{upstream}/_recorded").json()
    return records


def last_body(upstream: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(recorded(upstream)[-1]["body"])
    return body

"""Run the real ``compacting-proxy`` command as a process, for end-to-end tests against llama-server.

The proxy is configured only through its environment (``COMPACT_*``) and started from an empty
working directory, so neither the host's variables nor a stray ``.env`` leak into it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.processes import child_environment, free_port, log_tail, running_module, started

STARTUP_TIMEOUT_S = 60.0  # the four vocabularies are read before /healthz answers: seconds on a busy machine


@dataclass(frozen=True)
class ProxyServer:
    base_url: str  # http://127.0.0.1:PORT, without /v1
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


@contextmanager
def running_stub(window: int | None = None) -> Iterator[str]:
    """The project's stub model server (`python -m proxy.stub`), of `window` tokens if given, on a
    free port until the block ends; yields its /v1 URL."""
    with running_module("proxy.stub", *(["--window", str(window)] if window is not None else [])) as root:
        yield f"{root}/v1"


def proxy_command() -> list[str]:
    script = Path(sys.executable).parent / "compacting-proxy"
    return [str(script)] if script.exists() else [sys.executable, "-m", "proxy"]


@contextmanager
def running_proxy(
    upstream_url: str, window: int | str | None, *, args: tuple[str, ...] = (), **settings: str
) -> Iterator[ProxyServer]:
    """Serve the proxy in front of ``upstream_url`` (ending in /v1); extra ``settings`` become
    ``COMPACT_<NAME>`` variables, e.g. ``reply_reserve="64"``. A ``window`` of None leaves the
    proxy's default."""
    env = child_environment() | {"COMPACT_UPSTREAM_URL": upstream_url}
    if window is not None:
        env["COMPACT_WINDOW"] = str(window)
    env |= {f"COMPACT_{name.upper()}": value for name, value in settings.items()}
    with tempfile.TemporaryDirectory(prefix="compacting-proxy-") as tmp:
        port = free_port()
        log_path = Path(tmp) / "proxy.log"
        cmd = [*proxy_command(), "--host", "127.0.0.1", "--port", str(port), *args]
        with started(
            cmd,
            port=port,
            health="/healthz",
            log_path=log_path,
            name="compacting-proxy",
            cwd=Path(tmp),
            env=env,
            timeout=STARTUP_TIMEOUT_S,
        ) as process:
            yield ProxyServer(f"http://127.0.0.1:{port}", process, log_path)


RETRIES = re.compile(r'^compacting_proxy_overflow_retries_total\{outcome="retried"\} (\S+)$', re.M)


@contextmanager
def proxy_for_llama(upstream_url: str, n_ctx: int, config: str) -> Iterator[ProxyServer]:
    """The proxy in front of a llama-server: told its window and estimating (`estimate`), or asking
    it for the window and counting with its own tokenizer (`exact`)."""
    if config == "exact":
        with running_proxy(upstream_url, "auto", tokenizer="upstream") as proxy:
            yield proxy
    else:
        with running_proxy(upstream_url, n_ctx) as proxy:
            yield proxy


def overflow_retries(proxy: ProxyServer) -> int:
    """How often the proxy retried after an upstream's context error, from its metrics."""
    found = RETRIES.search(httpx.get(f"{proxy.base_url}/metrics").text)
    return int(float(found.group(1))) if found else 0

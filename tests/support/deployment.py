"""A real deployment on loopback: `redis-server`, N `compacting-proxy` processes sharing it, and
Debian's `haproxy` in front of them, round robin (what a team puts in front of its replicas)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import free_port, log_tail, stop
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy


@dataclass
class Redis:
    url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        stop(self.process)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def running_redis(port: int | None = None) -> Iterator[Redis]:
    """A `redis-server` on loopback, on `port` (a free one when None), without persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (scripts/test.sh installs it from Debian)")
    port = port or free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not _answers_ping(port):
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        yield Redis(f"redis://127.0.0.1:{port}/0", process)
    finally:
        stop(process)


HAPROXY_CONFIG = """\
global
    maxconn 1024
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
frontend proxies
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
{servers}
"""


@dataclass
class Deployment:
    base_url: str  # haproxy's
    replicas: list[ProxyServer]


@contextmanager
def running_haproxy(backends: list[str]) -> Iterator[str]:
    """haproxy on a free port, round robin over `backends` (host:port); its base URL."""
    binary = shutil.which("haproxy")
    if binary is None:
        pytest.skip("haproxy is not installed (scripts/test.sh installs it from Debian)")
    port = free_port()
    servers = "\n".join(f"    server r{i} {backend}" for i, backend in enumerate(backends))
    with tempfile.TemporaryDirectory(prefix="haproxy-") as tmp:
        config = Path(tmp) / "haproxy.cfg"
        config.write_text(HAPROXY_CONFIG.format(port=port, servers=servers))
        log_path = Path(tmp) / "haproxy.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [binary, "-db", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            deadline = time.monotonic() + 10
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"haproxy exited:\n{log_tail(log_path)}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"haproxy did not listen:\n{log_tail(log_path)}") from None
                    time.sleep(0.05)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(process)


@contextmanager
def running_deployment(
    replicas: int, upstream_url: str, window: int | str | None, **settings: str
) -> Iterator[Deployment]:
    """`replicas` proxies (with the same `settings`) behind haproxy."""
    with ExitStack() as stack:
        proxies = [
            stack.enter_context(running_proxy(upstream_url, window, **settings)) for _ in range(replicas)
        ]
        base_url = stack.enter_context(running_haproxy([p.base_url.removeprefix("http://") for p in proxies]))
        yield Deployment(base_url, proxies)

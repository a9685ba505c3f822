"""The protocol's client limits reach it as an argument, from the settings, in every worker: the
command builds `ClientLimits` from the one settings object (the environment and the `.env` file) and
hands it to uvicorn as the protocol's constructor argument, no longer through `os.environ`."""

from __future__ import annotations

import pickle
import socket
from dataclasses import asdict
from pathlib import Path

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from proxy.connections.protocol import ClientLimits, LimitedHttpToolsProtocol, protocol_with
from proxy.settings import Settings
from tests.support.processes import VENV_BIN, free_port, running

LIMITS = ClientLimits(
    max_header_bytes=2048,
    header_timeout=3.5,
    body_timeout=4.5,
    max_client_connections=7,
    min_body_rate=100.0,
    min_body_rate_grace=1.5,
)


def test_the_limits_are_the_settings_of_the_same_names() -> None:
    settings = Settings(_env_file=None, **asdict(LIMITS))  # type: ignore[call-arg]
    assert ClientLimits.of(settings) == LIMITS
    assert ClientLimits.of(Settings(_env_file=None)) == ClientLimits()  # type: ignore[call-arg]


async def test_the_protocol_takes_its_limits_as_an_argument_that_pickles() -> None:
    """uvicorn pickles its config, `http` with it, into each spawned worker (async: the protocol takes
    the running loop)."""
    factory = pickle.loads(pickle.dumps(protocol_with(LIMITS)))
    config = Config(app=None, lifespan="off", access_log=False, log_level="warning")
    protocol = factory(config=config, server_state=ServerState(), app_state={})
    assert isinstance(protocol, LimitedHttpToolsProtocol)
    seen = (
        protocol.max_header_bytes,
        protocol.header_timeout,
        protocol.body_timeout,
        protocol.max_client_connections,
        protocol.min_body_rate,
        protocol.min_rate_grace,
    )
    assert seen == (2048, 3.5, 4.5, 7, 100.0, 1.5)


def status_of(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while b"\r\n" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
    return answer.split(b" ", 2)[1]


@pytest.mark.process
def test_limits_from_the_env_file_reach_every_worker(tmp_path: Path) -> None:
    """`--workers 2 --env-file`: a head limit set only in the file holds on every connection, so in
    both workers (the kernel hands connections to either), and a head under it passes."""
    env_file = tmp_path / "proxy.env"
    env_file.write_text("COMPACT_MAX_HEADER_BYTES=2048\nCOMPACT_UPSTREAM_URL=http://127.0.0.1:9/v1\n")
    port = free_port()
    command = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--no-access-log"]
    command += ["--workers", "2", "--env-file", str(env_file)]
    with running(command, ready_url=f"http://127.0.0.1:{port}/healthz", timeout=60):
        small = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * 1000 + b"\r\n\r\n"
        large = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * 4000 + b"\r\n\r\n"
        for _ in range(12):
            assert status_of(port, large) == b"431"
            assert status_of(port, small) == b"200"

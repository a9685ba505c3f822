"""A uvicorn HTTP protocol with no socket under it, fed reads by hand: the reads a socket could deliver,
cut where a test wants them, and no network's noise in what a benchmark times. Shared by
`tests/connections/test_protocol.py` and `benchmarks/throughput/bench_protocol.py`."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState


class RecordingTransport(asyncio.Transport):
    """What the protocol wrote, and whether it closed; reading is never paused, there is no socket."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def socketless(protocol_class: Any, app: Any) -> Any:
    """A protocol of `protocol_class` serving `app` as uvicorn makes one (no lifespan, no access log),
    not yet connected: set its limits, then `connection_made(RecordingTransport())`."""
    config = Config(app=app, lifespan="off", access_log=False, log_level="warning")
    config.load()
    return protocol_class(config=config, server_state=ServerState(), app_state={})

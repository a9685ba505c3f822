"""Start and stop a real llama.cpp ``llama-server`` on a free loopback port.

The server runs the tiny random-weight model from ``scripts/tiny_model.py`` with llama.cpp's own
Qwen2.5 Instruct chat template embedded (tool-capable, used with ``--jinja``).  The binary comes
from the cache that ``scripts/llama_server.py`` fills; this module never builds it.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from scripts import llama_server as llama_build
from scripts import tiny_model
from tests.support.processes import ServerStartError, free_port, log_tail, stop, wait_healthy

CHAT_TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"
STARTUP_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class LlamaServer:
    """A running llama-server; ``n_ctx`` is the per-slot window one request can use."""

    base_url: str  # http://127.0.0.1:PORT, without /v1
    n_ctx: int
    slots: int
    model_path: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


def write_model(directory: Path, *, seed: int = 0) -> Path:
    template = (llama_build.templates_dir() / CHAT_TEMPLATE).read_text()
    return tiny_model.write_tiny_model(directory / "tiny.gguf", seed=seed, chat_template=template)


def count_prompt_tokens(base_url: str, body: dict[str, Any]) -> int:
    """The server's own count for a chat body: its template applied, then its tokenizer.

    Equals the ``usage.prompt_tokens`` it reports for the same body, so a test can know the real
    size of a chat without sending it as a completion.
    """
    with httpx.Client(base_url=base_url, timeout=30.0) as client:
        rendered = client.post("/apply-template", json=body)
        rendered.raise_for_status()
        tokens = client.post("/tokenize", json={"content": rendered.json()["prompt"]})
        tokens.raise_for_status()
        return len(tokens.json()["tokens"])


@contextmanager
def running_llama_server(
    ctx: int = 1024, slots: int = 1, *, binary: Path | None = None, chat_template: str | None = None
) -> Iterator[LlamaServer]:
    """Run llama-server with ``ctx`` tokens of context split over ``slots`` slots; stop it on exit.
    ``chat_template`` (Jinja text) replaces the model's own (``--chat-template-file``)."""
    binary = binary or llama_build.binary_path()
    if not binary.exists():
        raise ServerStartError(f"{binary} is not built; run: python scripts/llama_server.py build")
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        workdir = Path(tmp)
        extra: list[str] = []
        if chat_template is not None:
            (workdir / "template.jinja").write_text(chat_template)
            extra = ["--chat-template-file", str(workdir / "template.jinja")]
        server = _start(binary, write_model(workdir), workdir, ctx=ctx, slots=slots, extra=extra)
        try:
            yield server
        finally:
            stop(server.process)


def _start(
    binary: Path, model: Path, workdir: Path, *, ctx: int, slots: int, extra: list[str] | None = None
) -> LlamaServer:
    # A probed port can be taken before the server binds it: retry on a fresh one if it dies.
    error: ServerStartError | None = None
    for attempt in range(PORT_ATTEMPTS):
        port = free_port()
        log_path = workdir / f"llama-server-{attempt}.log"
        cmd = [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            str(ctx),
            "-np",
            str(slots),
            "--jinja",
            # A fixed sampling seed: the random tiny model's replies are then the same on every run
            # (sampled freely, a reply that starts a tool call badly fails llama.cpp's tool-call
            # parser with a 500 now and then).
            "--seed",
            "1",
            # One thread: the model is tiny, and spinning threads crawl on a busy 2-core runner.
            "-t",
            "1",
            "-tb",
            "1",
            *(extra or []),
        ]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        base_url = f"http://127.0.0.1:{port}"
        try:
            # /health answers 503 while the model loads, 200 once requests can be served.
            wait_healthy(
                base_url, "/health", process, log_path, timeout=STARTUP_TIMEOUT_S, name="llama-server"
            )
        except ServerStartError as exc:
            stop(process)
            error = exc
            continue
        return LlamaServer(base_url, _slot_context(base_url), slots, model, log_path, process)
    assert error is not None
    raise error


def _slot_context(base_url: str) -> int:
    props = httpx.get(f"{base_url}/props", timeout=5.0).json()
    return int(props["default_generation_settings"]["n_ctx"])

"""Run the real aider (``aider-chat`` from PyPI, in a venv of its own: ``scripts/aider_venv.py``)
against the scripted model server (``tests/support/upstreams/aider_model.py``), directly or through
the real ``compacting-proxy`` process, and say what came of it.

The session is one a developer resumes with a local model: a source file, the chat history of earlier
sessions restored (``--restore-chat-history``, about 45k tokens of questions about the code and answers
with code in them), the model's metadata as its model card gives it (a 128k window,
``--model-metadata-file``) while the server runs it at 32k, and aider's own history summary left for
half that window (``--max-chat-history-tokens 65536``: the developer keeps the history whole rather
than have it summarised). With aider's default (1/16 of the window) it summarises the older part in
one request, itself over the server's window; and when that fails aider 0.86 sends the next request
with no history at all (``summarize_end`` takes the failed summary's empty list): no overflow, but the
history is lost, with or without the proxy. The task is one edit in the ``whole`` format,
``--message`` with ``--yes-always --no-git``, everything that would reach the network off
(``--no-check-update``, ``--analytics-disable``, ``LITELLM_LOCAL_MODEL_COST_MAP``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from scripts.aider_venv import AIDER_VERSION, binary_path
from tests.support.agent_clis import run_cli
from tests.support.processes import free_port, running
from tests.support.upstreams.agent_model import count
from tests.support.upstreams.proxy_server import running_proxy

ROOT = Path(__file__).resolve().parents[2]
MODEL = "openai/local-model"
FILE = "hello.py"
TASK = f"Add a greet(name) function to {FILE} that returns a greeting."
SOURCE = '''"""A small module the session works on."""


def add(a, b):
    return a + b


def shout(text):
    return text.upper() + "!"
'''
CLAIMED_WINDOW = 131_072  # the model card's; aider's own history limit is 1/16 of it


@dataclass(frozen=True)
class AiderRun:
    proxied: bool
    exit_code: int
    output: str
    edited: str  # the file after the run
    received: list[dict[str, Any]]  # what the server received: tokens, over, kind
    history_tokens: int  # the restored history, cl100k

    @property
    def over(self) -> int:
        return sum(r["over"] for r in self.received)

    @property
    def hit_the_limit(self) -> bool:
        return "has hit a token limit!" in self.output


def history_markdown(target_tokens: int) -> str:
    """Earlier sessions' chat history, as aider writes it (``#### `` user lines, the answers as text):
    questions about httpx's modules, answered with their code."""
    sources = sorted(Path(httpx.__file__).parent.glob("_*.py"))
    parts = ["# aider chat started at 2026-12-01 09:00:00\n\n"]
    tokens, n = 0, 0
    while tokens < target_tokens:
        source = sources[n % len(sources)]
        lines = [line for line in source.read_text().splitlines() if not line.startswith("#")]
        chunk = "\n".join(lines[(n // len(sources)) * 80 :][:80])
        question = f"#### What does {source.name} do around part {n // len(sources) + 1}? Explain it.\n\n"
        answer = (
            f"Here is that part of `{source.name}`:\n\n```python\n{chunk}\n```\n\nIt handles that step.\n\n"
        )
        parts += [question, answer]
        tokens += count(question + answer)
        n += 1
    return "".join(parts)


@contextmanager
def aider_model(window: int) -> Iterator[str]:
    port = free_port()
    args = [sys.executable, "-m", "tests.support.upstreams.aider_model", "--port", str(port)]
    args += ["--window", str(window), "--file", FILE]
    with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env={"PYTHONPATH": str(ROOT)}):
        yield f"http://127.0.0.1:{port}"


def run_aider(window: int, *, proxied: bool, history_tokens: int = 45_000, timeout: float = 300) -> AiderRun:
    with tempfile.TemporaryDirectory(prefix="agent-aider-") as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        work.mkdir()
        home.mkdir()
        (work / FILE).write_text(SOURCE)
        history = history_markdown(history_tokens)
        (work / ".aider.chat.history.md").write_text(history)
        claimed = max(CLAIMED_WINDOW, 4 * history_tokens)  # a card's window past the history's size
        metadata = {
            MODEL: {
                "max_input_tokens": claimed,
                "max_tokens": claimed,
                "max_output_tokens": 8192,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
        (work / "model-metadata.json").write_text(json.dumps(metadata))
        with aider_model(window) as server, _maybe_proxy(proxied, f"{server}/v1", window) as base:
            cmd = [
                str(binary_path()),
                *("--model", MODEL, "--openai-api-base", f"{base}/v1", "--openai-api-key", "sk-test"),
                *("--model-metadata-file", "model-metadata.json", "--edit-format", "whole"),
                *("--max-chat-history-tokens", str(claimed // 2)),
                *("--yes-always", "--no-git", "--no-auto-lint", "--no-check-update", "--analytics-disable"),
                *("--no-show-release-notes", "--no-pretty", "--no-fancy-input", "--map-tokens", "0"),
                *("--restore-chat-history", "--chat-history-file", ".aider.chat.history.md"),
                *("--input-history-file", ".aider.input.history", "--message", TASK, FILE),
            ]
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(home),
                "TERM": "dumb",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            }
            code, output = run_cli(cmd, work, env, timeout)
            received = httpx.get(f"{server}/_recorded", timeout=30).json()
        return AiderRun(proxied, code, output, (work / FILE).read_text(), received, count(history))


@contextmanager
def _maybe_proxy(proxied: bool, upstream: str, window: int) -> Iterator[str]:
    if not proxied:
        yield upstream.removesuffix("/v1")
        return
    with running_proxy(upstream, window) as proxy:
        yield proxy.base_url


def version() -> str:
    return AIDER_VERSION

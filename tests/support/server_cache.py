"""Replaying a conversation against a llama-server and reading how much of each prompt it took from
its KV cache (`timings.cache_n`) and how much it evaluated (`timings.prompt_n`), as llama.cpp's
`result_timings::to_json` (`tools/server/server-task.cpp`) reports them: shared by
`benchmarks/cache/bench_server_cache.py` and `tests/llama/test_llama_cache.py`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

Message = dict[str, Any]
MAX_TOKENS = 1  # the reply is not what is measured: the prompt is
MODEL = "tiny"


@dataclass(slots=True)
class Run:
    conversation: str
    window: int
    sender: str
    requests: int = 0
    answered: int = 0
    cached: int = 0  # sum of timings.cache_n
    evaluated: int = 0  # sum of timings.prompt_n
    breaks: int = 0
    refused_at: int | None = None
    kept: list[int] = field(default_factory=list)  # each answered prompt's size

    @property
    def share(self) -> float:
        total = self.cached + self.evaluated
        return self.cached / total if total else 0.0


def send(client: httpx.Client, url: str, messages: list[Message]) -> dict[str, Any] | None:
    """The server's answer, None when it refused the prompt as too long."""
    body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
    response = client.post(url, json=body)
    if response.status_code == 400:
        return None
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


def replay(
    base_url: str,
    name: str,
    window: int,
    sender: str,
    requests: list[list[Message]],
    shape: Callable[[list[Message]], list[Message]],
) -> Run:
    run = Run(name, window, sender)
    previous = 0
    with httpx.Client(timeout=600) as client:
        for k, history in enumerate(requests):
            run.requests += 1
            answer = send(client, f"{base_url}/v1/chat/completions", shape(history))
            if answer is None:
                run.refused_at = k
                break
            timings = answer["timings"]
            run.answered += 1
            run.cached += timings["cache_n"]
            run.evaluated += timings["prompt_n"]
            if k and timings["cache_n"] < previous // 2:
                run.breaks += 1
            previous = timings["cache_n"] + timings["prompt_n"]
            run.kept.append(previous)
    return run

"""Side by side with Headroom: the same real agent trajectories through both `/v1/compress`
endpoints, as a gateway calls them (issue 38, item 5).

``python -m benchmarks.agents.bench_headroom [--quick] [--headroom PATH] [--windows 8192,16384,32768]``

(``--quick`` without Headroom installed measures the proxy's side alone, and says so.)

Headroom is not a dependency of this project. Install it in a venv of its own first::

    python3 -m venv ~/.cache/compacting-proxy/headroom-0.42
    ~/.cache/compacting-proxy/headroom-0.42/bin/pip install 'headroom-ai[proxy]==0.42.*'

(``--headroom`` names its ``headroom`` command; that path is the default). Both servers run as real
processes on loopback, offline: ``headroom proxy`` (its default posture, ``HEADROOM_OFFLINE=1``: no
model download, so its Kompress text model falls back to its non-ML path) and ``compacting-proxy``.
Each is called as LiteLLM's guardrail calls it, ``{"model", "messages"}`` with the window (Headroom's
``token_budget``, the proxy's ``window``), stateless. The trajectories are the longest real ones of
mini-swe-agent and SWE-agent (``bench_notes.py``'s set under ``~/.cache/compacting-proxy/
real-trajectories``); a request is the history an agent sent for one model call. Headroom takes
seconds a call on long histories, so each trajectory gives ``--pairs`` pairs of consecutive requests
(k, k+1), spread over its second half, where the histories are long. Per system and window:

- over: requests whose messages, counted with cl100k_base (the proxy's bundled tiktoken), are more
  than the window (a server refuses them, or cuts them silently);
- refused: answers that are errors, or say they could not fit (``fits: false``), for a request that
  fitted as it came (a false refusal);
- facts: of the facts (paths, errors, names: ``bench_trajectories.facts_of``) of the history's
  observations that the agent's next message used, the share still in the request sent;
- cache: of each request's tokens, the share the next request sends again as an unchanged prefix
  (what a server's prompt cache can reuse);
- ms: the added latency, the median time of a `/v1/compress` call over loopback (both measured in
  the same run, so their ratio holds under this machine's load).

The proxy is measured twice: as LiteLLM calls it (a stub for each dropped message) and as Kong's or
Portkey's compressor URL can ask (`/merge/v1/compress`: one marker for each dropped run).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.agents.bench_trajectories import assistant_text, facts_of
from benchmarks.cache.bench_server_cache import real_trajectories
from proxy.counting.tokens import RequestCounter, text_of
from proxy.planning.counters import text_counter
from tests.support.cache_replay import common_prefix
from tests.support.processes import free_port, running
from tests.support.upstreams.proxy_server import running_proxy

Message = dict[str, Any]
HEADROOM = Path.home() / ".cache" / "compacting-proxy" / "headroom-0.42" / "bin" / "headroom"
NOWHERE = "http://127.0.0.1:9/v1"  # neither calls the upstream on /v1/compress
MODEL = "gpt-4o"
COUNT = RequestCounter(text_counter("cl100k_base")).message


@dataclass
class Tally:
    requests: int = 0
    over: int = 0
    refused: int = 0
    used: int = 0
    kept: int = 0
    base: int = 0
    reused: int = 0
    saved: int = 0
    sent: int = 0
    seconds: list[float] = field(default_factory=list)

    def row(self, name: str, window: int) -> str:
        facts = self.kept / self.used if self.used else 1.0
        cache = self.reused / self.base if self.base else 1.0
        ms = 1000 * statistics.median(self.seconds) if self.seconds else 0.0
        return (
            f"| {name} | {window:,} | {self.requests} | {self.over} | {self.refused} | {facts:.1%} | {cache:.1%} "
            f"| {self.saved / max(1, self.sent):.1%} | {ms:,.0f} |"
        )


def tokens(messages: list[Message]) -> int:
    return sum(COUNT(m) for m in messages)


def trajectories(count: int) -> list[tuple[str, list[list[Message]]]]:
    """Each agent's `count` longest trajectories: the history it sent for each model call."""
    return list(real_trajectories(count, shrink=1))


Compress = Callable[[list[Message], int], tuple[list[Message] | None, bool, float]]


def compressor(url: str, window_field: str) -> Compress:
    client = httpx.Client(timeout=600)

    def compress(messages: list[Message], window: int) -> tuple[list[Message] | None, bool, float]:
        started = time.perf_counter()
        response = client.post(url, json={"model": MODEL, "messages": messages, window_field: window})
        seconds = time.perf_counter() - started
        if response.status_code != 200:
            return None, True, seconds
        body = response.json()
        return body["messages"], body.get("fits") is False, seconds

    return compress


def used_next(history: list[Message], reply: Message) -> set[str]:
    """The facts of the history's observations that the agent's next message uses."""
    said = assistant_text(reply)
    facts: set[str] = set()
    for message in history:
        if message["role"] in ("tool", "user"):
            facts |= {f for f in facts_of(text_of(message.get("content"))) if f in said}
    return facts


def measure(compress: Compress, tally: Tally, requests: list[list[Message]], k: int, window: int) -> None:
    """Requests k and k+1 of a trajectory through `compress`, into `tally` (the agent's reply to a
    request is where the next request goes on)."""
    sent = []
    for history, following in ((requests[k], requests[k + 1]), (requests[k + 1], requests[k + 2])):
        out, refused, seconds = compress(history, window)
        before = tokens(history)
        tally.requests += 1
        tally.seconds.append(seconds)
        tally.refused += refused and before <= window
        out = history if out is None else out
        after = tokens(out)
        tally.over += after > window
        tally.sent += before
        tally.saved += before - after
        used = used_next(history, following[len(history)])
        text = json.dumps(out)
        tally.used += len(used)
        tally.kept += sum(1 for f in used if f in text)
        sent.append(out)
    shared = common_prefix(sent[0], sent[1])
    tally.base += tokens(sent[0])
    tally.reused += tokens(sent[0][:shared])


def pairs_of(calls: int, count: int) -> list[int]:
    """`count` request indices k (each with k+1, and k+2 for its reply), spread over the second half."""
    last = calls - 3
    if last < 1:
        return []
    start = last // 2
    step = max(1, (last - start) // max(1, count))
    return list(range(start, last + 1, step))[:count]


def headroom_compressor(stack: ExitStack, headroom: Path) -> Compress:
    """Headroom's proxy, offline, in a home of its own: its `/v1/compress`."""
    home = stack.enter_context(tempfile.TemporaryDirectory(prefix="headroom-home-"))
    port = free_port()
    env = {"HOME": home, "HEADROOM_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = [str(headroom), "proxy", "--host", "127.0.0.1", "--port", str(port), "--openai-api-url", NOWHERE]
    stack.enter_context(running(args, ready_url=f"http://127.0.0.1:{port}/health", env=env, timeout=180))
    return compressor(f"http://127.0.0.1:{port}/v1/compress", "token_budget")


def run(headroom: Path | None, windows: list[int], per_agent: int, pairs: int) -> None:
    found = trajectories(per_agent)
    rows: dict[tuple[str, int], Tally] = {}
    with ExitStack() as stack:
        systems = {"Headroom 0.42": headroom_compressor(stack, headroom)} if headroom else {}
        proxy = stack.enter_context(running_proxy(NOWHERE, 8192, upstream_kind="openai"))
        systems["compacting-proxy"] = compressor(f"{proxy.base_url}/v1/compress", "window")
        # As Kong and Portkey can ask: the dropped messages merged into one marker a run.
        systems["compacting-proxy, merge"] = compressor(f"{proxy.base_url}/merge/v1/compress", "window")
        for name, requests in found:
            print(f"{name}: {pairs} pairs", file=sys.stderr)
            for window in windows:
                for system, compress in systems.items():
                    tally = rows.setdefault((system, window), Tally())
                    for k in pairs_of(len(requests), pairs):
                        measure(compress, tally, requests, k, window)
    print(f"{len(found)} trajectories ({', '.join(n for n, _ in found)}), load {os.getloadavg()[0]:.1f}")
    print(
        "| system | window | requests | over the window | false refusals | facts kept | cache | saved | ms |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (system, window), tally in sorted(rows.items(), key=lambda item: (item[0][1], item[0][0])):
        print(tally.row(system, window))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one trajectory per agent, 2 pairs, at 8,192")
    parser.add_argument("--headroom", type=Path, default=HEADROOM, help="Headroom's `headroom` command")
    parser.add_argument("--windows", default="8192,16384,32768")
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    headroom: Path | None = args.headroom
    if not args.headroom.exists():
        missing = f"{args.headroom} not found: install headroom-ai in its own venv (this module's docstring)"
        if not args.quick:
            sys.exit(missing)
        print(f"{missing}; the proxy's side alone", file=sys.stderr)
        headroom = None
    windows = [8192] if args.quick else [int(w) for w in args.windows.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers it started, too
    run(headroom, windows, 1 if args.quick else 2, 2 if args.quick else args.pairs)


if __name__ == "__main__":
    main()

"""Window use behind an honest upstream (issue 34): how much of the window the proxy lets the server
use, and whether it ever refuses what fits or sends what does not.

``python -m benchmarks.counting.bench_window_use [--quick]`` runs the real `compacting-proxy` process, as the
default install runs it (the base dependencies only: `tests.support.default_install`) and as the full
one does (every extra, every tokenizer), told nothing but the upstream's URL, in front of the vLLM-shaped
upstream of the window tests (`tests.support.upstreams.vllm`: it counts with a real vocabulary through a
chat template, advertises 16,384 tokens, refuses prompt + `max_tokens` over it, reports honest usage).
Three upstreams: Llama 3 under a name that says so, cl100k under a name that says nothing (`local`),
and the same behind a gateway that routes `/v1` alone (no `/tokenize`).

Per kind of text (prose, code, JSON, number-heavy output, Chinese, Japanese; held-out texts,
`tests.support.upstreams.vllm_workloads`), requests sized by the server's own count: a pasted text at
90%, 97% and 99.5% of the window (it fits; nothing in it may be cut), a chat of old tool results and an
agent loop at 1.2x and 1.6x the window asking 32,000 tokens of reply (as Claude Code does). And an
agent loop of 24 steps of number-heavy results at 16,384 ("agent loops"), sent step by step.

Figures, as shares: *over*, requests the upstream refused for its window; *false refusals*, the
proxy's own refusals of requests that fit (prompt under the window by the server's count), of those
that fit; *reply kept*, requests whose reply kept the reserve (1,024) or what the client asked, of the
compacted ones; *reply room*, the median room left for the reply (the forwarded `max_tokens`, else
what the prompt leaves) over the window; *fill*, the median share of the window the forwarded prompt
fills by the server's count, of the compacted requests (the loop: of the steps after it outgrew the
window).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.default_install import default_install_environment
from tests.support.upstreams import vllm_workloads as work
from tests.support.upstreams.proxy_server import running_proxy
from tests.support.upstreams.vllm import VllmServer, running_vllm

WINDOW = 16_384
RESERVE = 1_024
ASKED = 32_000
UPSTREAMS: dict[str, dict[str, Any]] = {  # the fake vLLM: its vocabulary, its model, behind a gateway
    "llama3": {"vocabulary": "llama3", "model": "llama-3.1-8b-instruct"},
    "local": {"vocabulary": "cl100k", "model": "local"},
    "gateway": {"vocabulary": "cl100k", "model": "local", "gateway": True},
}
INSTALLS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "default": default_install_environment,
    "full": contextlib.nullcontext,
}


@dataclass
class Tally:
    sent: int = 0
    over: int = 0
    fitting: int = 0
    refused: int = 0
    compacted: int = 0
    reply_kept: int = 0
    rooms: list[float] = field(default_factory=list)
    fills: list[float] = field(default_factory=list)

    def row(self) -> str:
        def share(part: int, whole: int) -> str:
            return f"{part / whole:.2f} ({part}/{whole})" if whole else "-"

        def median(values: list[float]) -> str:
            return f"{statistics.median(values):.2f}" if values else "-"

        return (
            f"{share(self.over, self.sent):>13} {share(self.refused, self.fitting):>13} "
            f"{share(self.reply_kept, self.compacted):>13} {median(self.rooms):>6} {median(self.fills):>5}"
        )


@dataclass(frozen=True)
class Probe:
    body: dict[str, Any]
    tokens: int  # the server's count of the request as it came
    asked: int | None


def probes(vllm: VllmServer, kind: str, quick: bool) -> list[Probe]:
    """The requests of one kind, sized by the upstream's own count."""
    pastes = (0.97,) if quick else (0.9, 0.97, 0.995)
    overs = (1.6,) if quick else (1.2, 1.6)
    shapes: list[tuple[Callable[[int], dict[str, Any]], float, int | None]] = [
        *((lambda n: work.paste(kind, n), share, None) for share in pastes),
        *((lambda n: work.history(kind, n), share, ASKED) for share in overs),
        *((lambda n: work.loop(kind, 12, n // 12), share, ASKED) for share in overs),
    ]
    found = []
    for make, share, asked in shapes:
        body = work.sized(make, int(share * WINDOW), vllm.count_body)
        found.append(
            Probe({**body, **({"max_tokens": asked} if asked else {})}, vllm.count_body(body), asked)
        )
    return found


def send(base_url: str, vllm: VllmServer, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """The client's status, and every request the upstream received for it (a retry after its refusal too)."""
    vllm.clear()
    answer = httpx.post(f"{base_url}/v1/chat/completions", json={**body, "model": vllm.model}, timeout=300)
    return answer.status_code, vllm.received()


def judge(tally: Tally, probe: Probe, status: int, all_received: list[dict[str, Any]]) -> None:
    tally.sent += 1
    fits = probe.tokens < WINDOW
    tally.fitting += fits
    tally.over += any(r["status"] == 400 for r in all_received)
    received = all_received[-1] if all_received else None
    if received is None or status != 200:
        tally.refused += fits and received is None
        return
    prompt = received["prompt_tokens"]
    room = received["max_tokens"] if received["max_tokens"] is not None else WINDOW - prompt
    tally.rooms.append(room / WINDOW)
    if probe.tokens > 0.8 * WINDOW and received["body"]["messages"] != probe.body["messages"]:
        tally.compacted += 1
        tally.reply_kept += room >= min(RESERVE, probe.asked or RESERVE)
        tally.fills.append(prompt / WINDOW)


def loop_use(base_url: str, vllm: VllmServer, steps: int) -> Tally:
    """An agent loop of number-heavy results sent step by step (what a long loop is forwarded as)."""
    tally = Tally()
    for step in range(1, steps + 1):
        body = work.loop("numbers", step, 2_500)
        status, all_received = send(base_url, vllm, body)
        received = all_received[-1] if all_received else None
        tally.sent += 1
        tally.fitting += 1  # every step can be made to fit: compaction may cut the old results
        tally.over += any(r["status"] == 400 for r in all_received)
        tally.refused += received is None
        if received is not None and status == 200:
            tally.rooms.append((WINDOW - received["prompt_tokens"]) / WINDOW)
            if vllm.count_body(body) > WINDOW:
                tally.fills.append(received["prompt_tokens"] / WINDOW)
    return tally


def measure(upstream: str, quick: bool) -> Iterator[str]:
    with running_vllm(WINDOW, reply_tokens=16, **UPSTREAMS[upstream]) as vllm:
        requests = {kind: probes(vllm, kind, quick) for kind in work.KINDS}
        for install, environment in INSTALLS.items():
            with environment(), running_proxy(f"{vllm.base_url}/v1", None) as proxy:
                for kind, found in requests.items():
                    tally = Tally()
                    for probe in found:
                        judge(tally, probe, *send(proxy.base_url, vllm, probe.body))
                    yield f"{upstream:8} {install:8} {kind:12} {tally.row()}"
                loop = loop_use(proxy.base_url, vllm, 12 if quick else 24)
                yield f"{upstream:8} {install:8} {'agent loops':12} {loop.row()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one paste and one size over, the gateway only")
    args = parser.parse_args()
    started = time.monotonic()
    print(f"window {WINDOW}, reserve {RESERVE}; shares of requests (count), medians of shares of the window")
    print(
        f"{'upstream':8} {'install':8} {'kind':12} {'over':>13} {'false refusal':>13} {'reply kept':>13} {'room':>6} {'fill':>5}"
    )
    for upstream in ["gateway"] if args.quick else sorted(UPSTREAMS):
        for line in measure(upstream, args.quick):
            print(line, flush=True)
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()

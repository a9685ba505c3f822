"""The server's own prompt cache through the proxy, read from llama-server's timings (issue 24, item 6).

``python -m benchmarks.bench_server_cache [--quick] [--windows 8192,32768]``

llama.cpp's server keeps the KV cache of a slot's last prompt and reuses the longest common prefix of
the next one; every answer says how much it reused: ``timings.cache_n`` (prompt tokens taken from
the cache) and ``timings.prompt_n`` (prompt tokens it had to evaluate), from
``result_timings::to_json`` in llama.cpp's ``tools/server/server-task.cpp`` (the same figures as
``usage.prompt_tokens_details.cached_tokens``). Here a real llama-server (``scripts/llama_server.py``,
the tiny model of ``scripts/tiny_model.py``, one slot, ``-c`` the window) answers every model call of
a long agent loop (``agent_loops.py``) and a long support chat (``tests/support/simulated_chats.py``),
each request carrying the whole history so far, sent three ways:

- ``direct``: as the client has it, until the server refuses it (``exceed_context_size_error``);
- ``seed``: compacted by the pattern's own algorithm (``tests/support/cache_replay.plain_proxy``:
  level 1 then level 2, stop as soon as it fits, on the full history every time), told the window
  in its own count (chars/4 against the tiny tokenizer's real tokens, measured on the first request);
- ``ours``: through the real ``compacting-proxy`` process (``COMPACT_WINDOW=auto``, which reads the
  slot's ``n_ctx`` from ``/props``, counting with the server's ``/tokenize`` near the line).

The figure is the share of prompt tokens served from the server's cache: sum(cache_n) over
sum(cache_n + prompt_n), and the requests whose prefix broke (cache_n under half of the previous
prompt). The tiny tokenizer makes about three tokens of what chars/4 counts as one, so the
conversations grow a third as fast as the other benchmarks' to keep the same growth per window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack

from benchmarks import agent_loops
from proxy.counting.tokens import RequestCounter
from proxy.settings import Settings
from proxy.upstream.counters import text_counter
from proxy.upstream.planner import Planner
from tests.support import cache_replay
from tests.support import simulated_chats as sim
from tests.support.server_cache import MODEL, Message, Run, replay
from tests.support.upstreams.llama import count_prompt_tokens, running_llama_server
from tests.support.upstreams.proxy_server import running_proxy


def conversations(quick: bool, shrink: int = 3) -> Iterator[tuple[str, list[list[Message]]]]:
    """The agent loop (each tool result cut to its head, `1 / shrink` of it) and the chat."""
    calls = 24 if quick else 70
    loop = agent_loops.agent_loop(f"agent loop, 1 request, {calls} calls", 11, [calls])
    # A third of each tool result (its head): the tiny tokenizer makes three tokens of one.
    messages = [
        {**m, "content": m["content"][: len(m["content"]) // shrink]} if m["role"] == "tool" else m
        for m in loop.messages
    ]
    yield loop.name, [messages[:end] for end in loop.requests]
    turns = 15 if quick else 60
    chat = sim.simulate(turns, tokens_per_turn=650, seed=0)
    yield f"support chat, {turns} turns", [chat.history(k) for k in range(len(chat.requests))]


SENDERS = ("direct", "seed", "ours")
# (target, drop_to): the default, drops only to the target (as before), and lower targets and drops.
TRADEOFF_KNOBS = [(0.6, 0.8), (0.6, 1.0), (0.6, 0.6), (0.5, 0.8), (0.4, 0.8)]


def measure(quick: bool, windows: list[int], senders: tuple[str, ...] = SENDERS, only: str = "") -> list[Run]:
    runs: list[Run] = []
    for window in windows:
        for name, requests in conversations(quick):
            if only not in name:
                continue
            with ExitStack() as stack:
                server = stack.enter_context(running_llama_server(ctx=window))
                # The seed counts chars/4: told the window in that count, as measured on this server.
                sample = requests[min(len(requests) - 1, 3)]
                real = count_prompt_tokens(server.base_url, {"messages": sample})
                estimated = cache_replay.plain_estimate("", sample)
                seed_window = int(window * estimated / max(1, real))
                seed = cache_replay.plain_proxy(seed_window)
                if "direct" in senders:
                    runs.append(replay(server.base_url, name, window, "direct", requests, lambda h: h))
                if "seed" in senders:
                    runs.append(
                        replay(
                            server.base_url,
                            name,
                            window,
                            "seed",
                            requests,
                            lambda h, seed=seed: seed(h).messages,
                        )
                    )
                if "ours" in senders:
                    proxy = stack.enter_context(
                        running_proxy(
                            f"{server.base_url}/v1", "auto", tokenizer="upstream", upstream_kind="openai"
                        )
                    )
                    runs.append(replay(proxy.base_url, name, window, "ours", requests, lambda h: h))
            print(
                f"{name} at {window}: "
                + ", ".join(f"{r.sender} {r.share:.1%}" for r in runs[-len(senders) :]),
                file=sys.stderr,
            )
    return runs


def tradeoff(quick: bool, window: int, knobs: list[tuple[float, float]]) -> str:
    """Without a server: the share of each request's tokens (by the estimate) the next one sends
    again as an unchanged prefix, against the tokens of history each request keeps, per target and
    `drop_to`, for the same conversations through the planner (`window` in the estimate's tokens)."""
    counter = RequestCounter(text_counter("estimate"))
    lines = [
        "| conversation | target | drop to | prefix kept (of each request's tokens) | prefix broke | mean request (tokens kept) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, requests in conversations(quick):
        for target, drop_to in knobs:
            settings = Settings(_env_file=None, window=window, target=target, drop_to=drop_to)  # type: ignore[call-arg]
            planner = Planner(settings)
            previous: list[Message] | None = None
            kept = total = breaks = 0
            for history in requests:
                out = asyncio.run(planner.plan({"model": MODEL, "messages": history})).result.messages
                costs = [counter.message(m) for m in out]
                if previous is not None:
                    same = next(
                        (j for j, (a, b) in enumerate(zip(previous, out, strict=False)) if a != b),
                        min(len(previous), len(out)),
                    )
                    kept += sum(costs[:same])
                    breaks += sum(costs[:same]) < sum(costs) // 2
                total += sum(costs)
                previous = out
            lines.append(
                f"| {name} | {target} | {drop_to} | {kept / max(1, total):.1%} | {breaks} of {len(requests)} | "
                f"{total / max(1, len(requests)):,.0f} |"
            )
    return "\n".join(lines)


def markdown(runs: list[Run], command: str, seconds: float) -> str:
    lines = [
        f"`{command}` ({seconds:.0f} s)",
        "",
        "| conversation | window | sent | requests answered | prompt tokens from the server's cache | prefix broke | mean prompt |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        answered = f"{r.answered} of {r.requests}"
        if r.refused_at is not None:
            answered += f" (400 at request {r.refused_at})"
        mean = f"{sum(r.kept) / len(r.kept):,.0f}" if r.kept else "-"
        lines.append(
            f"| {r.conversation} | {r.window // 1024}k | {r.sender} | {answered} | "
            f"**{r.share:.1%}** ({r.cached:,} of {r.cached + r.evaluated:,}) | {r.breaks} | {mean} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8k only, a 24-call loop and a 15-turn chat")
    parser.add_argument("--windows", type=str, help="default 8192,32768 (8192 with --quick)")
    parser.add_argument("--senders", type=str, default=",".join(SENDERS))
    parser.add_argument(
        "--only", type=str, default="", help="the conversations whose name has this (loop, chat)"
    )
    parser.add_argument(
        "--tradeoff",
        type=int,
        metavar="WINDOW",
        help="no server: prefix kept against tokens kept, per target",
    )
    args = parser.parse_args(argv)
    for key in [k for k in os.environ if k.startswith("COMPACT_")]:
        del os.environ[key]
    windows = [int(w) for w in (args.windows or ("8192" if args.quick else "8192,32768")).split(",")]
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.bench_server_cache", *map(shlex.quote, given)])
    started = time.perf_counter()
    if args.tradeoff:
        print(f"`{command}`\n\n" + tradeoff(args.quick, args.tradeoff, TRADEOFF_KNOBS))
        return
    runs = measure(args.quick, windows, tuple(args.senders.split(",")), args.only)
    print(markdown(runs, command, time.perf_counter() - started))
    print(
        json.dumps(
            [
                {"conversation": r.conversation, "window": r.window, "sender": r.sender, "share": r.share}
                for r in runs
            ]
        ),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

"""The server's own prompt cache through the proxy, read from llama-server's timings (issue 24, item 6).

``python -m benchmarks.cache.bench_server_cache [--quick] [--windows 8192,32768]``

llama.cpp's server keeps the KV cache of a slot's last prompt and reuses the longest common prefix of
the next one; every answer says how much it reused: ``timings.cache_n`` (prompt tokens taken from
the cache) and ``timings.prompt_n`` (prompt tokens it had to evaluate), from
``result_timings::to_json`` in llama.cpp's ``tools/server/server-task.cpp`` (the same figures as
``usage.prompt_tokens_details.cached_tokens``). Here a real llama-server (``scripts/llama_server.py``,
the tiny model of ``scripts/tiny_model.py``, one slot, ``-c`` the window) answers every model call of
a long agent loop (``agent_loops.py``), a long support chat (``tests/support/simulated_chats.py``) and
the longest real trajectories of two agents (mini-swe-agent's and SWE-agent's, the set
``bench_notes.py`` reads from ``~/.cache/compacting-proxy/real-trajectories``; skipped, and said so,
when absent), each request carrying the whole history so far (a trajectory's requests end where
each of its assistant messages begins, as the agent sent them), sent three ways:

- ``direct``: as the client has it, until the server refuses it (``exceed_context_size_error``);
- ``seed``: compacted by the pattern's own algorithm (``tests/support/cache_replay.plain_proxy``:
  level 1 then level 2, stop as soon as it fits, on the full history every time), told the window
  in its own count (chars/4 against the tiny tokenizer's real tokens, measured on the first request);
- ``ours``: through the real ``compacting-proxy`` process (``COMPACT_WINDOW=auto``, which reads the
  slot's ``n_ctx`` from ``/props``, counting with the server's ``/tokenize`` near the line).

Each sender has a llama-server of its own (the server keeps earlier prompts in RAM, ``--cache-ram``, and
would serve one sender what another left there). ``--proxy-setting NAME=VALUE`` passes a setting to
ours (``COMPACT_NAME``), e.g. ``loop_room_calls=1``.

The figure is the share of prompt tokens served from the server's cache: sum(cache_n) over
sum(cache_n + prompt_n), and the requests whose prefix broke (cache_n under half of the previous
prompt). The tiny tokenizer makes about three tokens of what chars/4 counts as one, so the
conversations grow a third as fast as the other benchmarks' to keep the same growth per window (the
loop's and the trajectories' observations are cut to their head third).

The ceiling beside each figure: every call must evaluate at least what the client appended since the
previous call (the server's count of the whole history, before compaction, less the previous one's),
so no sender can take more than 1 - sum(appended) / sum(prompt) of its prompts from the cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

from benchmarks.agents.real_trajectories import DEFAULT_REAL, load_real
from benchmarks.cache import agent_loops
from proxy.counting.tokens import RequestCounter
from proxy.planning.counters import text_counter
from proxy.planning.planner import Planner
from proxy.settings import Settings
from tests.support import cache_replay
from tests.support import simulated_chats as sim
from tests.support.server_cache import MODEL, Message, Run, replay
from tests.support.upstreams.llama import count_prompt_tokens, running_llama_server
from tests.support.upstreams.proxy_server import running_proxy


def conversations(quick: bool, shrink: int = 3) -> Iterator[tuple[str, list[list[Message]]]]:
    """The agent loop (each tool result cut to its head, `1 / shrink` of it), the chat and the
    longest real trajectories."""
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
    yield from real_trajectories(1 if quick else REAL_PER_AGENT, shrink)


REAL_PER_AGENT = 2  # the longest trajectories of each agent, by model calls


def real_trajectories(count: int, shrink: int) -> Iterator[tuple[str, list[list[Message]]]]:
    """Each agent's `count` longest real trajectories, observations (tool results, and the user
    messages after the task, mini-swe-agent's) cut to their head `1 / shrink`."""
    for agent in ("mini-swe-agent", "swe-agent"):
        directory = DEFAULT_REAL / agent
        if not directory.is_dir():
            print(f"no real {agent} trajectories under {directory}: skipped", file=sys.stderr)
            continue
        trajectories = load_real(directory, 1000)
        trajectories.sort(key=lambda t: -sum(m["role"] == "assistant" for m in t))
        for messages in trajectories[:count]:
            first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), len(messages))
            messages = [
                _head(m, shrink) if m["role"] == "tool" or (m["role"] == "user" and i > first_user) else m
                for i, m in enumerate(map(_as_sent, messages))
            ]
            ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > first_user]
            yield f"real {agent}, {len(ends)} calls", [messages[:end] for end in ends]


# What the agents send of a message (mini-swe-agent: role and content; SWE-agent's
# `_history_to_messages` adds the calls); the trajectory files keep more (thought, action, agent).
SENT_FIELDS = ("role", "content", "tool_calls", "tool_call_id")


def _as_sent(message: Message) -> Message:
    return {k: message[k] for k in SENT_FIELDS if message.get(k) is not None}


def _head(message: Message, shrink: int) -> Message:
    content = message.get("content")
    if isinstance(content, list):  # SWE-agent's `cache_control` parts: one text part
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        return message
    return {**message, "content": content[: len(content) // shrink]}


SENDERS = ("direct", "seed", "ours")
# (target, drop_to): the default, drops only to the target (as before), and lower targets and drops.
TRADEOFF_KNOBS = [(0.6, 0.8), (0.6, 1.0), (0.6, 0.6), (0.5, 0.8), (0.4, 0.8)]


def messages_of(compactor: cache_replay.Compactor) -> Callable[[list[Message]], list[Message]]:
    """What a compactor sends for a history, as a sender's shape of it."""
    return lambda history: compactor(history).messages


def appended_tokens(base_url: str, requests: list[list[Message]]) -> list[int]:
    """What the client appends at each request: the server's count of its whole history, less the
    previous request's (the first request's whole)."""
    counts = [count_prompt_tokens(base_url, {"messages": history}) for history in requests]
    return [b - a for a, b in zip([0, *counts], counts, strict=False)]


def ceiling(appended: list[int], run: Run) -> float:
    """The most of `run`'s prompts any cut could take from the cache: each answered call evaluates
    at least what was appended to it (or its whole prompt, if that is less)."""
    total = sum(run.kept)
    return 1 - sum(min(a, p) for a, p in zip(appended, run.kept, strict=False)) / max(1, total)


def measure(
    quick: bool,
    windows: list[int],
    senders: tuple[str, ...] = SENDERS,
    only: str = "",
    proxy_settings: dict[str, str] | None = None,
) -> tuple[list[Run], list[float]]:
    runs: list[Run] = []
    ceilings: list[float] = []  # beside each run, what any cut could take from the cache
    for window in windows:
        for name, requests in conversations(quick):
            if only not in name:
                continue
            with running_llama_server(ctx=window) as server:
                # The seed counts chars/4: told the window in that count, as measured on this server.
                sample = requests[min(len(requests) - 1, 3)]
                real = count_prompt_tokens(server.base_url, {"messages": sample})
                estimated = cache_replay.plain_estimate("", sample)
                seed = cache_replay.plain_proxy(int(window * estimated / max(1, real)))
                appended = appended_tokens(server.base_url, requests)
            shapes: dict[str, Callable[[list[Message]], list[Message]]] = {
                "direct": lambda h: h,
                "seed": messages_of(seed),
                "ours": lambda h: h,
            }
            for sender in senders:
                # A server of its own: llama-server keeps earlier prompts in RAM (`--cache-ram`) and
                # would serve one sender what another left there.
                with ExitStack() as stack:
                    server = stack.enter_context(running_llama_server(ctx=window))
                    url = server.base_url
                    if sender == "ours":
                        url = stack.enter_context(
                            running_proxy(
                                f"{server.base_url}/v1",
                                "auto",
                                tokenizer="upstream",
                                upstream_kind="openai",
                                args=(),
                                **(proxy_settings or {}),
                            )
                        ).base_url
                    runs.append(replay(url, name, window, sender, requests, shapes[sender]))
                    ceilings.append(ceiling(appended, runs[-1]))
            print(
                f"{name} at {window}: "
                + ", ".join(f"{r.sender} {r.share:.1%}" for r in runs[-len(senders) :]),
                file=sys.stderr,
            )
    return runs, ceilings


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


def markdown(runs: list[Run], ceilings: list[float], command: str, seconds: float) -> str:
    lines = [
        f"`{command}` ({seconds:.0f} s)",
        "",
        "| conversation | window | sent | requests answered | prompt tokens from the server's cache | ceiling | prefix broke | mean prompt |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r, top in zip(runs, ceilings, strict=True):
        answered = f"{r.answered} of {r.requests}"
        if r.refused_at is not None:
            answered += f" (400 at request {r.refused_at})"
        mean = f"{sum(r.kept) / len(r.kept):,.0f}" if r.kept else "-"
        lines.append(
            f"| {r.conversation} | {r.window // 1024}k | {r.sender} | {answered} | "
            f"**{r.share:.1%}** ({r.cached:,} of {r.cached + r.evaluated:,}) | {top:.1%} | {r.breaks} | {mean} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8k only, a 24-call loop and a 15-turn chat")
    parser.add_argument("--windows", type=str, help="default 8192,32768 (8192 with --quick)")
    parser.add_argument("--senders", type=str, default=",".join(SENDERS))
    parser.add_argument(
        "--only", type=str, default="", help="the conversations whose name has this (loop, chat, real)"
    )
    parser.add_argument(
        "--proxy-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of ours (COMPACT_NAME), e.g. loop_room_calls=1",
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
    command = " ".join(["python -m benchmarks.cache.bench_server_cache", *map(shlex.quote, given)])
    started = time.perf_counter()
    if args.tradeoff:
        print(f"`{command}`\n\n" + tradeoff(args.quick, args.tradeoff, TRADEOFF_KNOBS))
        return
    proxy_settings = dict(setting.split("=", 1) for setting in args.proxy_setting)
    runs, ceilings = measure(args.quick, windows, tuple(args.senders.split(",")), args.only, proxy_settings)
    print(markdown(runs, ceilings, command, time.perf_counter() - started))
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

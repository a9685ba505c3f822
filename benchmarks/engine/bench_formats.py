"""What each wire format's adapter adds to a compacted request: parse, read into the neutral
conversation, compact, write back onto the original body, serialise, for the same agent chat in
Chat Completions, Responses and Anthropic Messages form. Figures are medians of warm runs (the
counter remembers the texts, as in a chat's steady state), and ratios against Chat Completions
measured in the same run.

    python -m benchmarks.engine.bench_formats [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import orjson

from proxy.bodies.jsonbody import dump_json, parse_json_object
from proxy.counting.cache import LruCache
from proxy.counting.tokens import RequestCounter
from proxy.engine.index import Policy
from proxy.engine.plan import plan_chat
from proxy.formats import ANTHROPIC, CHAT, RESPONSES, WireFormat
from proxy.planning.counters import text_counter
from proxy.settings import ModelWindow
from tests.support.conversations import agent_chat
from tests.support.format_chats import as_anthropic, as_responses

SIZES = (100, 1_000, 3_000)
NOTES = LruCache(4096)  # the planner's memo of written notes


def bodies(messages: int) -> dict[str, bytes]:
    turns = max(1, messages * 450 // 1972)
    chat = agent_chat(turns, seed=1, result_items=6, parallel=2)
    chat = chat if chat[0]["role"] == "system" else [{"role": "system", "content": "You help."}, *chat]
    instructions, items = as_responses(chat)
    system, messages_ = as_anthropic(chat)
    return {
        "chat": orjson.dumps({"model": "m", "max_tokens": 500, "messages": chat}),
        "responses": orjson.dumps(
            {"model": "m", "max_output_tokens": 500, "instructions": instructions, "input": items}
        ),
        "messages": orjson.dumps({"model": "m", "max_tokens": 500, "system": system, "messages": messages_}),
    }


def window_for(raw: bytes, counter: RequestCounter) -> ModelWindow:
    """A window a third of the chat's size: every request is compacted."""
    body = orjson.loads(raw)
    tokens = sum(counter.message(m) for m in body["messages"])
    return ModelWindow(window=tokens // 3, threshold=0.8, target=0.6, keep_recent_turns=2, reply_reserve=500)


def one_request(wire: WireFormat, raw: bytes, window: ModelWindow, counter: RequestCounter) -> bytes:
    body = parse_json_object(raw)
    conversation = wire.read(body, {})
    assert conversation is not None
    request: dict[str, Any] = conversation.request
    plan = plan_chat(request, request["messages"], window, counter, Policy(), memo=NOTES)
    assert plan.result.changed
    return dump_json(wire.write(body, conversation, plan))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats = 3 if args.quick else 9
    counter = RequestCounter(text_counter("estimate"))
    formats: dict[str, WireFormat] = {"chat": CHAT, "responses": RESPONSES, "messages": ANTHROPIC}
    print("| messages | format | ms (median) | ratio to chat |")
    print("| --- | --- | --- | --- |")
    for size in SIZES[:2] if args.quick else SIZES:
        raws = bodies(size)
        window = window_for(raws["chat"], counter)
        medians = {}
        for name, wire in formats.items():
            one_request(wire, raws[name], window, counter)  # warm the counter
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                one_request(wire, raws[name], window, counter)
                times.append(time.perf_counter() - started)
            medians[name] = statistics.median(times)
        for name, median in medians.items():
            print(f"| {size:,} | {name} | {median * 1000:.1f} | {median / medians['chat']:.2f} |")


if __name__ == "__main__":
    main()

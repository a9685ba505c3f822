# ruff: noqa: RUF001  (Chinese text, with its own full-width punctuation, on purpose)
"""Long agent histories for the gateway's fit tests: hundreds to thousands of messages of tool loops
(parallel calls, results of JSON, code, logs and Chinese prose), the user's requests in English and
Chinese, ending on a new request. Each tool result stays small enough (at most about 400 tokens)
that the part no compaction may cut (the system prompt, the first request, the latest turn) fits a
4,096-token window: the history can fit at every window, only not whole."""

from __future__ import annotations

import json
import random
from typing import Any

from tests.support.loops import call, source

Message = dict[str, Any]

SYSTEM = "You are a coding agent for a bike shop's order service. 你也可以用中文回答。"
CHINESE = (
    "订单已经发货，承运商是顺丰。客户说前轮有些弯曲，需要退货并重新发一个七百C的前轮。"
    "库存里还有十二个，仓库在上海。请在明天之前处理，并通知客户退款的进度。"
)
REQUESTS = (
    "Why does the billing test fail since the merge? Find out and fix it.",
    "请检查一下第{n}号订单的状态，然后告诉我库存。",
    "Now run the tests again and tell me what is still red.",
    "把 refund() 改成支持部分退款，并加一个测试。",
)
TOOLS = ("read_file", "grep", "run_tests", "get_order")


def tool_result(rng: random.Random, name: str, n: int) -> str:
    """One tool's output: code, a JSON order, a test log or Chinese notes, 20-400 tokens."""
    size = rng.randint(1, 12)
    if name == "read_file":
        return source(f"fn{n}", 4 * size)
    if name == "get_order":
        items = [{"sku": f"BW-{rng.randint(1000, 9999)}", "qty": rng.randint(1, 4)} for _ in range(size)]
        return json.dumps({"order": 4400 + n, "status": "shipped", "items": items, "备注": CHINESE[:40]})
    if name == "run_tests":
        lines = [f"tests/test_billing.py::test_case_{k} PASSED" for k in range(size * 2)]
        return "\n".join([*lines, f"FAILED tests/test_billing.py::test_refund_{n} - AssertionError"])
    return "\n".join(f"src/billing/mod_{n}_{k}.py:{10 * k + 1}: {CHINESE[: 10 + 3 * k]}" for k in range(size))


def long_history(messages: int, *, steps: int, seed: int, parallel: int = 3) -> list[Message]:
    """A system prompt and user requests until the history holds `messages` messages, each request
    answered after up to `steps` rounds of 1-`parallel` tool calls (none: a plain chat; many: one
    long agent loop after another), ending on a new request."""
    rng = random.Random(seed)
    history: list[Message] = [{"role": "system", "content": SYSTEM}]
    turn = 0
    while len(history) < messages:
        history.append({"role": "user", "content": rng.choice(REQUESTS).format(n=turn)})
        for step in range(rng.randint(steps // 2, steps)):
            names = [rng.choice(TOOLS) for _ in range(rng.randint(1, parallel))]
            calls = [
                call(f"c{turn}_{step}_{k}", name, path=f"src/m{turn}.py") for k, name in enumerate(names)
            ]
            words = rng.choice([None, "Let me look.", "我先看一下代码。"])
            history.append({"role": "assistant", "content": words, "tool_calls": calls})
            history += [
                {"role": "tool", "tool_call_id": c["id"], "content": tool_result(rng, n, turn)}
                for c, n in zip(calls, names, strict=True)
            ]
        history.append({"role": "assistant", "content": rng.choice(["Done: the tests pass.", CHINESE[:30]])})
        turn += 1
    history.append({"role": "user", "content": "最后：总结一下改了什么，还有哪些测试失败？"})
    return history

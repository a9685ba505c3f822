# ruff: noqa: RUF001  (the Chinese and Japanese sentences use full-width punctuation, as written)
"""Requests for the window tests and `benchmarks/counting/bench_window_use.py`, sized by an honest upstream's own
count (the vLLM fake's `/tokenize`, llama-server's template and tokenizer).

Texts of each kind, none of them from the corpus the estimate's margin was fitted on
(`tests.support.corpus`), so they stand for held-out data: English prose (the standard library's
documentation), source code (its sources), pretty-printed JSON (seeded API answers), number-heavy
output (CSV of counters, tab-separated weights, a space-padded table, an `od` dump: what the estimate
overcounts most, 1.6-1.8x what cl100k and Llama 3 count), Chinese and Japanese (sentences written for this, with numbers and dates drawn in). Three
shapes: a pasted text (nothing the proxy may cut), a chat whose old turns carry tool results of the
kind, and an agent loop (one task, then tool calls and their results). `sized` finds the largest
request of a shape that the upstream counts at most a given number of tokens.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import random
from collections.abc import Callable
from typing import Any

from tests.support.loops import call

KINDS = ("prose", "code", "JSON", "numbers", "Chinese", "Japanese")
Body = dict[str, Any]

_DOCUMENTED = (
    "argparse", "collections", "contextlib", "dataclasses", "difflib", "email.message", "functools",
    "http.client", "logging", "pathlib", "shutil", "sqlite3", "statistics", "subprocess", "tarfile",
    "textwrap", "threading", "unittest.case", "urllib.request", "zipfile", "decimal", "heapq",
)  # fmt: skip
_SOURCES = ("difflib", "textwrap", "statistics", "fractions", "heapq", "shlex", "calendar", "graphlib")

_ZH = (
    "今天上午九点，北方的冷空气开始南下，预计沿海地区的气温将下降六到八度。",
    "气象台提醒市民注意添加衣物，出门时携带雨具，尤其是早晚通勤的时段。",
    "这道红烧肉的做法并不复杂：先把五花肉切成三厘米见方的块，冷水下锅焯去血沫。",
    "锅里放少许油，加入冰糖小火炒出糖色，再把肉块倒进去翻炒均匀。",
    "第三季度的部署计划分为两步：先把订单服务迁移到新的集群，再逐步切换支付接口。",
    "迁移期间如果错误率超过千分之五，值班工程师需要立即回滚并在群里说明原因。",
    "图书馆的开放时间调整为每周二至周日，周一闭馆用于整理书架和设备维护。",
    "借阅期限仍然是三十天，可以在网上续借一次，逾期每天收取零点五元的费用。",
    "这条高铁线路全长四百二十公里，设计时速三百五十公里，沿途共设十一个车站。",
    "开通以后，两座城市之间的旅行时间将从五个小时缩短到一个半小时左右。",
    "请在提交报销单之前核对发票抬头、税号和金额，缺少任何一项都会被退回。",
    "如果系统提示上传失败，可以先清除浏览器缓存，或者换一台电脑再试一次。",
)
_JA = (
    "明日の朝は冷え込みが厳しく、山沿いでは雪が積もるおそれがあります。",
    "通勤の時間帯には路面の凍結に注意し、時間に余裕を持って出かけてください。",
    "このカレーは玉ねぎをじっくり炒めることで、甘みとこくが出ます。",
    "鍋に油を引き、薄切りにした玉ねぎを中火で二十分ほど炒めてください。",
    "新しい在庫管理システムへの移行は、来月の第二週に予定しています。",
    "移行作業中は受注画面が一時的に使えなくなるため、事前にお知らせします。",
    "市立美術館では、春の特別展として江戸時代の浮世絵を約百点展示しています。",
    "入館料は一般千二百円、高校生以下は無料で、毎週月曜日は休館日です。",
    "この路線は一日に四十往復運行しており、朝の時間帯は十分おきに発車します。",
    "人身事故の影響で、現在上下線とも運転を見合わせています。",
    "経費精算の締め切りは毎月二十五日です。領収書の原本を添付して提出してください。",
    "ログイン画面が表示されない場合は、キャッシュを削除してから再度お試しください。",
)


def _documentation() -> str:
    docs = []
    for name in _DOCUMENTED:
        module = importlib.import_module(name)
        docs.append(inspect.getdoc(module) or "")
        for _, member in sorted(vars(module).items()):
            if (inspect.isclass(member) or inspect.isfunction(member)) and member.__module__ == name:
                docs.append(inspect.getdoc(member) or "")
    return "\n\n".join(d for d in docs if len(d) > 200)


def _sources() -> str:
    return "\n\n".join(inspect.getsource(importlib.import_module(name)) for name in _SOURCES)


def _issues(rng: random.Random) -> str:
    words = [
        "cache",
        "retry",
        "timeout",
        "build",
        "deploy",
        "parser",
        "queue",
        "index",
        "worker",
        "token",
        "schema",
        "export",
    ]
    issues = [
        {
            "id": rng.randrange(10**8, 10**9),
            "number": rng.randrange(100, 9999),
            "title": " ".join(rng.choice(words) for _ in range(rng.randrange(3, 8))).capitalize(),
            "state": rng.choice(["open", "closed"]),
            "labels": [{"name": rng.choice(["bug", "enhancement", "question", "ci"])}],
            "user": {"login": f"user{rng.randrange(1000)}", "id": rng.randrange(10**6, 10**8)},
            "created_at": f"2025-{rng.randrange(1, 13):02}-{rng.randrange(1, 29):02}T{rng.randrange(24):02}:"
            f"{rng.randrange(60):02}:{rng.randrange(60):02}Z",
            "comments": rng.randrange(40),
            "draft": rng.random() < 0.1,
            "body": " ".join(rng.choice(words) for _ in range(rng.randrange(8, 30))) + ".",
        }
        for _ in range(60)
    ]
    return json.dumps(issues, indent=2)


def _numbers(rng: random.Random) -> str:
    csv = ["ts,sensor,count,errors,p50_ms,p99_ms,bytes_in,bytes_out,queue,retries"] + [
        f"{1735689600 + 60 * i},{rng.randrange(1, 40)},"
        + ",".join(str(rng.randrange(1000)) for _ in range(8))
        for i in range(80)
    ]
    weights = ["\t".join(f"{rng.random():.6f}" for _ in range(8)) for _ in range(60)]
    table = [
        "".join(f"{name:>10}" for name in ("id", "rx", "tx", "drop", "err", "fifo", "frame", "carrier"))
    ] + ["".join(f"{rng.randrange(10**6):10}" for _ in range(8)) for _ in range(60)]
    dump = [
        f"{offset:07o} " + " ".join(f"{b:02x}" for b in rng.randbytes(16)) for offset in range(0, 30 * 16, 16)
    ]
    return "\n".join([*csv, "", *weights, "", *table, "", *dump])


def _sentences(sentences: tuple[str, ...], label: str, rng: random.Random) -> str:
    out = []
    for i in range(400):
        if i % 7 == 6:
            out.append(
                f"（{label} {rng.randrange(10**5)}，{rng.randrange(2020, 2027)}-{rng.randrange(1, 13):02}）\n"
            )
        out.append(rng.choice(sentences))
    return "".join(out)


_MAKERS: dict[str, Callable[[random.Random], str]] = {
    "prose": lambda rng: _documentation(),
    "code": lambda rng: _sources(),
    "JSON": _issues,
    "numbers": _numbers,
    "Chinese": lambda rng: _sentences(_ZH, "编号", rng),
    "Japanese": lambda rng: _sentences(_JA, "番号", rng),
}


@functools.cache
def _sample(kind: str, seed: int) -> str:
    return _MAKERS[kind](random.Random(f"{kind}-{seed}"))


def text(kind: str, chars: int, seed: int = 0) -> str:
    """`chars` characters of `kind`, tiled from a point the seed picks."""
    sample = _sample(kind, seed)
    start = random.Random(seed).randrange(len(sample) // 2)
    tiled = sample[start:]
    while len(tiled) < chars:
        tiled += "\n" + _sample(kind, seed)
    return tiled[:chars]


TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"target": {"type": "string"}},
                "required": ["target"],
            },
        },
    }
    for name, description in (
        ("read_file", "Read a file of the workspace and return its text."),
        ("run_command", "Run a shell command in the workspace and return its output."),
        ("fetch_page", "Fetch a web page or an API endpoint and return its body."),
    )
]
SYSTEM = "You are a careful assistant. Use the tools to look things up; answer briefly and exactly."


def paste(kind: str, chars: int, seed: int = 0) -> Body:
    """A pasted text and a question about it: all of it protected, nothing the proxy may cut."""
    question = {
        "role": "user",
        "content": "Please read this and list what stands out:\n\n" + text(kind, chars, seed),
    }
    return {"messages": [{"role": "system", "content": SYSTEM}, question], "tools": TOOLS}


def history(kind: str, chars: int, seed: int = 0, turns: int = 6) -> Body:
    """A chat of `turns` user requests, each answered by a tool call whose result is ~`chars / turns`
    characters of `kind`, and a last short question: what the proxy may compact is the old turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    share = max(chars // turns, 1)
    for turn in range(turns):
        tool_call = call(f"call_{turn}", "run_command", target=f"report --part {turn}")
        messages += [
            {"role": "user", "content": f"Show me part {turn} of the report."},
            {"role": "assistant", "content": None, "tool_calls": [tool_call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": text(kind, share, seed + turn)},
            {"role": "assistant", "content": f"Part {turn} is above; it has {share} characters."},
        ]
    messages.append({"role": "user", "content": "Which part had the most unusual entry, and why?"})
    return {"messages": messages, "tools": TOOLS}


def loop(kind: str, steps: int, result_chars: int, seed: int = 0) -> Body:
    """An agent loop: one task, then `steps` tool calls each answered by `result_chars` of `kind`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Go through the workspace's reports and find the one that is off."},
    ]
    for step in range(steps):
        tool_call = call(f"call_{step}", "read_file", target=f"reports/{step:03}.txt")
        messages += [
            {"role": "assistant", "content": f"Reading report {step}.", "tool_calls": [tool_call]},
            {
                "role": "tool",
                "tool_call_id": f"call_{step}",
                "content": text(kind, result_chars, seed + step),
            },
        ]
    return {"messages": messages, "tools": TOOLS}


def sized(make: Callable[[int], Body], tokens: int, count: Callable[[Body], int]) -> Body:
    """The largest `make(n)` (n characters) found that the upstream counts at most `tokens`, and at
    least 99.75% of it: a few counts, each next size scaled by how far the last one landed."""
    chars, best = tokens * 3, 0
    for _ in range(16):
        counted = count(make(chars))
        if counted <= tokens:
            best = max(best, chars)
            if counted >= tokens * 0.9975:
                break
        following = int(chars * tokens / counted * (0.999 if counted > tokens else 1.0))
        chars = max(following if following != chars else chars + (1 if counted < tokens else -1), 1)
    if not best:
        raise ValueError(f"no request of this shape was counted under {tokens} tokens")
    return make(best)


# Gemini CLI 0.61's first request (no history): its long system instruction, its dozen tools with their
# JSON schemas, and one user turn of two parts (the session context, then the task).
GEMINI_TOOLS = (
    "list_directory", "read_file", "search_file_content", "glob", "replace", "write_file", "web_fetch",
    "read_many_files", "run_shell_command", "save_memory", "google_web_search", "write_todos",
)  # fmt: skip


def gemini_first_request(model: str, chars: int, described: int = 900) -> tuple[Body, Body]:
    """The Gemini API body Gemini CLI sends first, with `chars` characters of system instruction and
    `described` of each tool's description, and the chat body the proxy's Gemini bridge makes of it
    (what an OpenAI-compatible server counts)."""
    schema = {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "number"}}}
    declarations = [
        {"name": name, "description": text("prose", described, seed=i), "parametersJsonSchema": schema}
        for i, name in enumerate(GEMINI_TOOLS)
    ]
    system = text("prose", chars, seed=99)
    context = (
        "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n"
        "Today's date is Tuesday, March 3, 2026.\nMy operating system is: linux\n"
        "I'm currently working in the directory: /work/app\n</session_context>"
    )
    task = "Find why the nightly export job fails and propose a fix."
    gemini = {
        "contents": [{"role": "user", "parts": [{"text": context}, {"text": task}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": system}]},
        "tools": [{"functionDeclarations": declarations}],
        "generationConfig": {"temperature": 0, "topP": 1, "thinkingConfig": {"includeThoughts": True}},
    }
    chat_tools = [
        {
            "type": "function",
            "function": {"name": d["name"], "description": d["description"], "parameters": schema},
        }
        for d in declarations
    ]
    chat = {
        "model": model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"{context}\n{task}"},
        ],
        "tools": chat_tools,
    }
    return gemini, chat

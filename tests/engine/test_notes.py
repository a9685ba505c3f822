"""Notes and caps (`proxy/engine/notes.py`): linear work on any result, byte-stable notes, and notes that
keep what the next step of an agent uses.

Timing appears here only as generous bounds against quadratic blow-up (a pattern that rescans a run
of one character class from every position turns 80 KB into 15 s), and, over the real process, as
the issue's acceptance figures: a 1 MB adversarial old result noted in under 100 ms while `/healthz`
from another client answers within 50 ms.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.counting.modes import Counting
from proxy.engine.caps import cap_text
from proxy.engine.notes import NOTE_PREFIX, build_note, note_without_facts
from proxy.planning.counters import text_counter
from proxy.planning.local_count import TEMPLATE_FACTOR
from tests.support.upstreams.faulty import FaultyUpstream, serve_in_thread
from tests.support.upstreams.proxy_server import running_proxy

# The reproductions and their kin: long runs of one character class, separators, alternations.
ADVERSARIAL = {
    "summary then spaces": lambda n: "1 passed" + " " * n + "x",
    "dash-separated letters": lambda n: "a-" * (n // 2),
    "dotted letters": lambda n: "a." * (n // 2),
    "colons": lambda n: "::" * (n // 2),
    "comma digits": lambda n: "1," * (n // 2),
    "capitals": lambda n: "E   " + "A" * n,
    "modifiers": lambda n: "export " * (n // 7) + "def x",
    "error words on one line": lambda n: "error " * (n // 6),
    "exit codes": lambda n: "exit code " * (n // 10),
    "numbered blank lines": lambda n: "  1\t\n" * (n // 5),
    "plain words": lambda n: "word " * (n // 5),
    "success lines": lambda n: "Successfully installed a-1\n" * (n // 27),
    "error colons": lambda n: "a.py: error: " * (n // 13),
    "ls lines": lambda n: "-rw-r--r-- 1 a a 1 x\n" * (n // 21),
    "grep context": lambda n: "a.py-1-" * (n // 7),
    "url escapes and mail": lambda n: "%2F@a.b" * (n // 7),
}

# Pieces the patterns of notes and caps react to, for the property test to combine.
PIECES = [
    " ", "\n", "\t", "a", "A", "1", "-", ".", ":", "/", "_", "#", "$", ",", "=", "→", "\\", "é",
    "1 passed", " failed", "Error", "Exception", "error", "exit code ", "returncode", "def ", "class ",
    "export ", "async ", "::", "FAILED ", "ERROR ", "E   ", "a.py:1:", "\\u005c", "USD", "0x1f",
    "<returncode>1</returncode>", "Successfully installed ", "error: ", "-rw-r--r-- ", "a.py-1-", "%2F", "@",
]  # fmt: skip

MS_PER_KB = 3.0  # linear is ~0.05 ms a KB (1.5 at worst: a line per error word); quadratic at 40 KB is ~100
SLACK_MS = 50.0


def work(text: str) -> float:
    """Milliseconds to note and cap `text` as the engine does."""
    start = time.perf_counter()
    note_without_facts(text, tool="bash", arguments='{"command": "x"}')
    build_note(text, tool="bash", arguments='{"command": "x"}')
    for chars in (2_000, len(text) // 2):
        cap_text(text, chars, tool="bash")
    return (time.perf_counter() - start) * 1000


def assert_linear(text: str) -> None:
    bound = SLACK_MS + MS_PER_KB * len(text) / 1000
    # The best of up to three: a busy machine, not the code, makes one run slow; the first under
    # the bound ends it.
    elapsed = work(text)
    for _ in range(2):
        if elapsed < bound:
            break
        elapsed = min(elapsed, work(text))
    assert elapsed < bound, f"{elapsed:.0f} ms for {len(text):,} chars (bound {bound:.0f} ms)"


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_adversarial_results_are_noted_and_capped_in_linear_time(name: str) -> None:
    assert_linear(ADVERSARIAL[name](80_000))


@st.composite
def adversarial_texts(draw: st.DrawFn) -> str:
    """A few runs of pieces (a run may be one huge line), repeated up to at least 40 KB."""
    runs = draw(
        st.lists(
            st.tuples(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3), st.integers(1, 30_000)),
            min_size=1,
            max_size=4,
        )
    )
    unit = "".join("".join(pieces) * times for pieces, times in runs)
    return unit * max(1, 40_000 // max(1, len(unit))) if len(unit) < 40_000 else unit[:400_000]


def assert_byte_stable(text: str) -> None:
    args = '{"path": "src/app.py"}'
    assert build_note(text, tool="read", arguments=args) == build_note(text, tool="read", arguments=args)
    assert note_without_facts(text, tool="read", arguments=args) == note_without_facts(
        text, tool="read", arguments=args
    )


@pytest.mark.slow  # a long property run: seconds, not milliseconds
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=adversarial_texts())
def test_notes_and_caps_take_time_linear_in_the_result(text: str) -> None:
    assert_linear(text)
    assert_byte_stable(text)  # the long run of the next test, on the whole text


@settings(max_examples=20, deadline=None)  # the slow tier checks 60 more, whole
@given(text=adversarial_texts())
def test_notes_are_byte_stable(text: str) -> None:
    assert_byte_stable(text[:50_000])


# The real process: a 1 MB adversarial old tool result, and /healthz from another client meanwhile.

ONE_MB = 1_000_000
LOG_LINES = 2_000  # about 80 KB: noting the old result alone brings the chat under the target


def agent_chat(result: str) -> list[dict[str, Any]]:
    """A chat whose first exchange read a huge result (under the line then, so kept whole) and whose
    later turns read a big log: by then two requests came after that result, so it is old (out of
    the protected recent turns) and, with only the last result kept whole, becomes a note."""
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "make"}'}}
    test = {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "test"}'}}
    log = "".join(f"tests/test_{k}.py::test_case_{k} PASSED\n" for k in range(LOG_LINES))
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Build the project."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": result},
        {"role": "assistant", "content": "The build printed a lot; it seems to pass."},
        {"role": "user", "content": "Is the style right?"},
        {"role": "assistant", "content": "Yes, it follows STYLE.md."},
        {"role": "user", "content": "Good. Now run the tests."},
        {"role": "assistant", "content": None, "tool_calls": [test]},
        {"role": "tool", "tool_call_id": "call_2", "content": log},
        {"role": "assistant", "content": f"All {LOG_LINES} tests pass."},
        {"role": "user", "content": "Then commit it."},
    ]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultyUpstream]:
    with serve_in_thread() as server:
        yield server


def window_for(result: str) -> int:
    """A window whose line (0.8 of it) the huge result stays under when it comes, and the chat crosses
    once the log follows, by what the proxy counts an unnamed model's text with (the heaviest of its
    four vocabularies): so the result is kept, then noted. (By the estimate, 1 MB of capitals is
    250,000 tokens; every vocabulary merges the run into a tenth of that, and the chat fitted.)"""
    count = text_counter(Counting.HEAVIEST)
    log = next(m["content"] for m in agent_chat("") if m.get("tool_call_id") == "call_2")
    # The proxy adds the chat template's share to a vocabulary's count (`TEMPLATE_FACTOR`): without
    # it here, the result came 2% over the line and was capped first (a second count of 1 MB).
    return int((TEMPLATE_FACTOR * (count(result) + count(log) / 2) + 300) / 0.8)


# Another client, in its own process (so the test's own threads do not hold it up): it asks /healthz
# over one connection every 2 ms until its stdin closes, then prints each answer's latency in ms.
HEALTH_POLLER = """
import json, sys, threading, time, httpx
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
out = []
with httpx.Client(base_url=sys.argv[1], timeout=10) as client:
    client.get("/healthz")
    print("ready", flush=True)
    while not done.is_set():
        start = time.perf_counter()
        assert client.get("/healthz").status_code == 200
        out.append((time.perf_counter() - start) * 1000)
        time.sleep(0.002)
print(json.dumps(out), flush=True)
"""


@dataclass(frozen=True)
class Run:
    request_ms: float  # the one request that notes the result (a fresh proxy: nothing memoised)
    health_ms: float  # the longest /healthz answer meanwhile, from another client's process
    note: str  # what the upstream received in the result's place


def run_through_proxy(upstream: FaultyUpstream, result: str) -> Run:
    body = json.dumps({"model": "m", "messages": agent_chat(result)}).encode()
    headers = {"content-type": "application/json"}
    url = f"http://127.0.0.1:{upstream.port}/v1"
    # Only the latest result kept whole: of the chat's two, the huge one is old enough to be noted.
    recent = {"keep_recent_tool_results": "1"}
    with (
        running_proxy(url, window_for(result), **recent) as proxy,
        httpx.Client(base_url=proxy.base_url) as client,
    ):
        warm = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/chat/completions", json=warm).status_code == 200
        poller = subprocess.Popen(
            [sys.executable, "-c", HEALTH_POLLER, proxy.base_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert poller.stdin is not None and poller.stdout is not None
        try:
            assert poller.stdout.readline().strip() == "ready"
            time.sleep(0.02)
            start = time.perf_counter()
            response = client.post("/v1/chat/completions", content=body, headers=headers, timeout=120)
            request_ms = (time.perf_counter() - start) * 1000
            time.sleep(0.02)
        finally:
            poller.stdin.close()
            latencies: list[float] = json.loads(poller.stdout.readline() or "[0]")
            poller.wait(timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["x-compaction-truncated"] == "1"
    sent = [
        r for c in list(upstream.connections) for r in list(c.requests) if r.target.endswith("/completions")
    ]
    return Run(request_ms, max(latencies), json.loads(sent[-1].body)["messages"][3]["content"])


@pytest.fixture(scope="module")
def baseline(upstream: FaultyUpstream) -> Run:
    """The same request with a plain 1 MB result: what parsing, counting and forwarding it cost."""
    return run_through_proxy(upstream, ADVERSARIAL["plain words"](ONE_MB))


# Not "summary then spaces": a megabyte of spaces is 3 tokens by the estimate, never worth a note.
@pytest.mark.process
@pytest.mark.parametrize("name", ["dash-separated letters", "capitals", "colons", "comma digits"])
def test_a_1mb_adversarial_old_result_is_noted_fast_and_healthz_answers_meanwhile(
    upstream: FaultyUpstream, baseline: Run, name: str
) -> None:
    """The issue's bounds on what the adversarial text adds to a 1 MB request: its note within
    100 ms, /healthz within 50 ms. What any 1 MB request costs on the event loop (parsing, counting)
    is the baseline's, measured in the same run."""
    run = run_through_proxy(upstream, ADVERSARIAL[name](ONE_MB))
    assert run.note.startswith(NOTE_PREFIX) and len(run.note) < 2_000
    added = run.request_ms - baseline.request_ms
    assert added < 100, f"{run.request_ms:.0f} ms against {baseline.request_ms:.0f} ms for plain words"
    waited = run.health_ms - baseline.health_ms
    assert waited < 50, f"/healthz waited {run.health_ms:.0f} ms against {baseline.health_ms:.0f} ms"


# What a note keeps: what the next step of an agent uses, ranked above noise.


def test_kept_prefers_module_paths_and_names_over_escape_codes_and_numbers() -> None:
    escaped = "\\u005c\\u0027\\u0022\\u003c\\u003e" * 40
    result = (
        '{"cmd": "python -c ...", "stdout": "' + escaped + '", "stderr": "Traceback (most recent call '
        'last):\\n  File \\"/testbed/src/shop/billing/totals.py\\", line 41, in compute_invoice_total\\n'
        "    from shop.billing.rates import vat_rate_for\\nModuleNotFoundError: No module named "
        '\'shop.billing.rates\'\\n", "exit": 1, "lines": [120, 121, 122, 4096, 65535]'
    )
    kept = build_note(result, tool="bash", arguments='{"command": "python -c ..."}').split(" Kept: ")[1]
    assert "u005C" not in kept and "u005c" not in kept and "u0027" not in kept
    for fact in ("shop.billing.rates", "/testbed/src/shop/billing/totals.py", "ModuleNotFoundError"):
        assert fact in kept, fact


def numbered(lines: list[str]) -> str:
    return "".join(f"{n:6}\t{line}\n" for n, line in enumerate(lines, 1))


def test_a_file_read_outline_keeps_its_names_by_a_token_budget_top_level_first() -> None:
    """A long module: its top-level names all survive, also those at the end of the file, where a
    cut at 420 characters in file order lost every one past the first few dozen methods."""
    lines = ['"""Routing."""', "import re", ""]
    for c in range(12):
        lines += [
            f"class RouteKind{c}:",
            f"    def method_number_{c}_handles_requests(self):",
            "        pass",
        ]
        lines += [f"    def other_method_{c}_for_responses(self):", "        pass", ""]
    lines += ["def compile_path_regex(path):", "    return re.compile(path)", ""]
    lines += ["def get_route_path(scope):", "    return scope['path']", ""]
    note = build_note(numbered(lines), tool="read_file", arguments='{"path": "starlette/routing.py"}')
    outline = note.split(" Outline: ", 1)[1]
    for name in ["compile_path_regex", "get_route_path", *(f"RouteKind{c}" for c in range(12))]:
        assert name in outline, name
    assert "more)" in outline, "what is left out is counted"
    assert "lines 1-" in outline


def test_a_grep_note_keeps_the_files_matched_and_the_names_found() -> None:
    hits = [
        f"starlette/{mod}.py:{n}:    from starlette._utils import is_async_callable, run_in_threadpool"
        for n, mod in enumerate(["routing", "endpoints", "background", "applications"], 10)
    ]
    others = [
        f"starlette/{mod}.py:{n}:import anyio" for n, mod in enumerate(["types", "status", "config"], 1)
    ]
    result = "\n".join(others * 2 + hits * 3) + "\n"
    note = build_note(result, tool="bash", arguments='{"command": "grep -rn run_in_threadpool starlette"}')
    for fact in (
        "starlette/routing.py",
        "starlette/applications.py",
        "is_async_callable",
        "starlette._utils",
    ):
        assert fact in note, fact

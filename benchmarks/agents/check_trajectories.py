"""bench_trajectories' figures stand for mini-swe-agent and SWE-agent only if its trajectories are
shaped as theirs are (roles, THOUGHT and one bash block a step, `<returncode>` observations; the
SWE-agent tools, `OBSERVATION:` results, `cat -n` views, its cache-control marks) and made of real
output. ``python -m benchmarks.agents.check_trajectories`` generates a short one of each and checks them
(tests/bench/test_benchmark_commands.py runs it)."""

from __future__ import annotations

import itertools
import json
import re

from benchmarks.agents import trajectories as gen
from benchmarks.agents.trajectory_tasks import TASKS


def check() -> None:
    """The shapes each framework sends, checked on a short trajectory of each (assertions)."""
    task = TASKS[2]
    mini = gen.generate("mini-swe-agent", task, 0, chars=20_000, max_steps=30)
    roles = [m["role"] for m in mini.messages]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
    assert all(a != b for a, b in itertools.pairwise(roles[1:])), "user and assistant alternate"
    assert all(set(m) == {"role", "content"} for m in mini.messages)
    for message in mini.messages[2:]:
        if message["role"] == "assistant":
            assert message["content"].startswith("THOUGHT: ") and message["content"].count("```bash\n") == 1
        else:
            assert re.match(r"<returncode>\d+</returncode>\n<(output|warning)>", message["content"])
    assert mini.messages[-1]["content"].endswith(f"```bash\n{gen.SUBMIT}\n```")
    observations = "\n".join(m["content"] for m in mini.messages if m["role"] == "user")
    assert re.search(r"\d+ failed, \d+ passed", observations) and re.search(r"\n3 passed in", observations)
    assert mini.calls == [i for i, m in enumerate(mini.messages, 1) if m["role"] == "user"]

    swe = gen.generate("swe-agent", task, 0, chars=20_000, max_steps=30)
    tools = {t["function"]["name"] for t in swe.body["tools"]}
    assert tools == {"bash", "str_replace_editor", "submit"}
    calls = {}
    for message in swe.messages[2:]:
        if message["role"] == "assistant":
            (call,) = message["tool_calls"]
            assert call["function"]["name"] in tools and isinstance(
                json.loads(call["function"]["arguments"]), dict
            )
            calls[call["id"]] = call
        else:
            assert message["role"] == "tool" and message["tool_call_id"] in calls
            assert (
                message["content"].startswith("OBSERVATION:\n")
                or "did not produce any output" in message["content"]
            )
    last = swe.request(len(swe.calls) - 1)
    marked = [m for m in last if m.get("cache_control") or isinstance(m["content"], list)]
    assert marked == [m for m in last if m["role"] in ("user", "tool")][-2:]
    assert all(isinstance(m["content"], list) for m in marked)
    views = [
        m["content"] for m in swe.messages if m["role"] == "tool" and "`cat -n` on /testbed/" in m["content"]
    ]
    assert views and all(re.search(r"\n {5}\d\t|\n {4}\d\d\t|\n {3}\d{3}\t", v) for v in views)


if __name__ == "__main__":
    check()
    print("the trajectories have the wire shapes as mini-swe-agent's and SWE-agent's")

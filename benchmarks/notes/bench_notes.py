"""What the notes keep of what an agent's next steps use, on real trajectories and the generated ones.

Real trajectories of two agents this project did not generate: mini-swe-agent's (Gemini 3 Pro on
SWE-bench Verified, `gruckion/mini-swe-agent` `swebench_results/20251118_gemini-3-pro-74pct/trajs/`,
observations are `user` messages `<returncode>N</returncode>\\n<output>...`) and SWE-agent's own
(`SWE-agent/SWE-agent` `trajectories/demonstrations/` and `tests/test_data/trajectories/`, `.traj`
files whose `history` holds `tool` or `user` observations). They are not in this repository: put
them under `--real DIR` (default `~/.cache/compacting-proxy/real-trajectories/{mini-swe-agent,swe-agent}`),
e.g. with `git show` from a clone of each. Missing directories are skipped and said so. The second set
is the trajectories `bench_trajectories.py` generates (`benchmarks/agents/trajectories.py`, cached).

For every observation long enough that its note is shorter (what the engine would replace at level
1), the note is built as the engine builds it (`build_note`, same budget) and, by kind:

- exit status, outcome line: the observation's exit status and outcome lines (a success or failure line, the test counts,
  the error line: a Traceback's last line, `Error:`/`error:`, `FAILED ...`), found by
  `OUTCOME_PATTERNS` here (not the engine's code); kept if the note holds each line's words.
- path, error, defined, dotted, identifier: `bench_trajectories.facts_of` of the observation that a
  LATER assistant message or tool-call argument uses (the facts measure of `bench_trajectories.py`);
  number: numbers of 3+ digits and versions (`3.13.0`) a later step uses; kept if in the note.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.agents.bench_trajectories import assistant_text, facts_of
from proxy.counting.tokens import text_of
from proxy.engine.notes import build_note

Message = dict[str, Any]
DEFAULT_REAL = Path.home() / ".cache" / "compacting-proxy" / "real-trajectories"
KINDS = ("exit status", "outcome line", "path", "error", "defined", "dotted", "identifier", "number")
# Numbers that name things (versions, ids, ports, counts), not the line numbers of a listing or grep.
NUMBER = re.compile(r"(?<![\w.-])(?:[0-9]+(?:\.[0-9]+){1,3}|[0-9]{3,})(?![\w.])")
LINE_NUMBER = re.compile(r"(?:^|\n)[ \t]*+[0-9]+[\t:→-]|(?:^|\n)[^\s:]+[:-][0-9]+[:-]")
OUTCOME_PATTERNS = (
    re.compile(r"<returncode>(-?[0-9]+)</returncode>"),
    re.compile(r"^(Successfully (?:installed|built|uninstalled) [^\n]{1,200})$", re.M),
    re.compile(r"^=*\s*([0-9]+ (?:passed|failed|errors?)[^\n=]*?)\s*=*$", re.M),
    re.compile(r"^((?:FAILED|ERROR) \S+::\S+)", re.M),
    re.compile(r"^((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)(?::[^\n]{0,80})?)$", re.M),
    re.compile(r"^((?:Error|error|ERROR|fatal): [^\n]{1,80})", re.M),
)


def outcome_lines(text: str) -> list[str]:
    found: list[str] = []
    for pattern in OUTCOME_PATTERNS:
        for match in pattern.finditer(text):
            line = " ".join(match.group(1).split())
            if line and line not in found:
                found.append(line)
    return found[-4:] if len(found) > 4 else found


def _words_kept(line: str, note: str) -> bool:
    """An outcome line is kept if the note holds its first 60 characters (or the exit status)."""
    if line.lstrip("-").isdigit():
        return f"exit status {line}" in note or f"<returncode>{line}</returncode>" in note
    return " ".join(line[:60].split()) in " ".join(note.split())


def load_real(directory: Path, limit: int) -> list[list[Message]]:
    out: list[list[Message]] = []
    for path in sorted(directory.rglob("*.traj*"))[:limit]:
        data = json.loads(path.read_text())
        messages = data if isinstance(data, list) else data.get("messages") or data.get("history") or []
        out.append([m for m in messages if isinstance(m, dict) and "role" in m])
    return out


def observations(messages: list[Message]) -> Iterator[tuple[str, str, str, str]]:
    """(observation, tool, arguments, what later assistant messages say) for each observation."""
    later = [""] * (len(messages) + 1)
    for i in range(len(messages) - 1, -1, -1):
        said = assistant_text(messages[i]) if messages[i]["role"] == "assistant" else ""
        later[i] = said + "\n" + later[i + 1]
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), len(messages))
    command = ""
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            text = assistant_text(message)
            block = re.search(r"```(?:bash|mswea_bash_command)?\n(.*?)```", text, re.S)
            command = block.group(1).strip() if block else text[-200:]
        elif message["role"] in ("user", "tool") and i > first_user:
            yield text_of(message.get("content")), "bash", json.dumps({"command": command}), later[i + 1]


def measure(
    sets: dict[str, list[list[Message]]],
) -> tuple[dict[str, tuple[Counter[str], Counter[str]]], float]:
    report: dict[str, tuple[Counter[str], Counter[str]]] = {}
    seen: set[str] = set()
    slowest = 0.0
    for name, trajectories in sets.items():
        used: Counter[str] = Counter()
        kept: Counter[str] = Counter()
        for messages in trajectories:
            for text, tool, arguments, later in observations(messages):
                if text in seen:
                    continue  # SWE-agent's demonstrations replay the same run under several configs
                seen.add(text)
                start = time.perf_counter()
                note = build_note(text, tool=tool, arguments=arguments)
                slowest = max(slowest, time.perf_counter() - start)
                if len(note) >= len(text):
                    continue  # the engine keeps such a result whole
                for line in outcome_lines(text):
                    kind = "exit status" if line.lstrip("-").isdigit() else "outcome line"
                    used[kind] += 1
                    kept[kind] += _words_kept(line, note)
                facts = dict(facts_of(text))
                listed = {
                    m.group(0).strip(" \t\n:→-").rpartition(":")[2].rpartition("-")[2]
                    for m in LINE_NUMBER.finditer(text)
                }
                for match in NUMBER.finditer(text):
                    if match.group(0) not in listed:
                        facts.setdefault(match.group(0), "number")
                for fact, kind in facts.items():
                    if fact in later and re.search(rf"(?<![\w]){re.escape(fact)}(?![\w])", later):
                        used[kind] += 1
                        kept[kind] += fact in note
        report[name] = (used, kept)
    return report, slowest * 1000


def table(report: dict[str, tuple[Counter[str], Counter[str]]]) -> str:
    rows = ["| set | " + " | ".join(KINDS) + " | **all** |", "|---" * (len(KINDS) + 2) + "|"]
    for name, (used, kept) in report.items():
        cells = [f"{kept[k] / used[k]:.0%} ({used[k]})" if used[k] else "- (0)" for k in KINDS]
        total, got = sum(used.values()), sum(kept.values())
        cells.append(f"**{got / total:.0%}** ({total})" if total else "- (0)")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="10 real trajectories per agent, no generated set"
    )
    parser.add_argument("--real", type=Path, default=DEFAULT_REAL)
    parser.add_argument("--limit", type=int, default=80, help="real trajectories per agent")
    args = parser.parse_args()
    limit = 10 if args.quick else args.limit
    sets: dict[str, list[list[Message]]] = {}
    for agent in ("mini-swe-agent", "swe-agent"):
        directory = args.real / agent
        if directory.is_dir():
            sets[f"real {agent}"] = load_real(directory, limit)
        else:
            print(f"no real {agent} trajectories under {directory}: skipped")
    if not args.quick:
        from benchmarks.agents import trajectories as gen

        for trajectory in gen.cached_trajectories():
            if trajectory.framework not in gen.FRAMEWORKS:
                continue  # the chat's pastes are user messages, which the engine never notes
            sets.setdefault(f"generated {trajectory.framework}", []).append(trajectory.messages)
    report, slowest = measure(sets)
    print(table(report))
    print(f"\nslowest note: {slowest:.1f} ms")


if __name__ == "__main__":
    main()

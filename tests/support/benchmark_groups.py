"""Where a benchmark goes: `benchmarks/` holds one folder per thing measured and, at its top, nothing
but its `__init__.py` (BENCHMARKS.md's index says the same; `tests/project/test_layout.py` checks it).
A file left at the top is told each group and what it measures, or, when a group already has a module
of its name (a branch that edited it before it moved), where that module is now."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

GROUPS = {
    "throughput": "the real proxy process over sockets: requests/s, latency, memory, CPU per request",
    "engine": "the engine's CPU in process: compaction, planning, each format, the live page's record",
    "counting": "the count and the estimate against real tokenizers, and the window they keep",
    "notes": "what the notes that replace old text keep of what an agent later uses",
    "cache": "the prompt cache and agent loops: what each request sends again unchanged",
    "agents": "the real agent CLIs and real agent trajectories, direct and through the proxy",
    "replicas": "replicas sharing Redis behind haproxy",
}


def misplaced_benchmark(path: Path) -> str | None:
    """Why a file at the top of `benchmarks/` is not where the layout puts it, or None."""
    if path.parent != BENCHMARKS or path.name == "__init__.py" or path.is_dir():
        return None
    says = f"benchmarks/{path.name} is at the top of benchmarks/"
    there = sorted(p.relative_to(BENCHMARKS.parent) for p in BENCHMARKS.glob(f"*/{path.name}"))
    if there:
        return f"{says}; {there[0]} is the module of that name now: merge the two there"
    groups = "; ".join(f"{group}/: {what}" for group, what in GROUPS.items())
    return f"{says}; it goes in the group of what it measures ({groups})"

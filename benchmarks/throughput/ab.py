"""A/B against other checkouts for ``benchmarks.throughput.run --baseline DIR``: the CPU a target's process
spends per request (read from ``/proc``, steadier than req/s on a shared machine: it does not count
the time the process waited for a core), and a table of this checkout against each baseline, the
ratio taken round by round (the two ran one after the other in each round) and its median given.
"""

from __future__ import annotations

import statistics
from typing import Any

from tests.support.proc import cpu_seconds


def cpu_seconds_of(pid: int | None) -> float | None:
    """The CPU seconds the process `pid` has used so far, None if there is none to read (gone, or none)."""
    try:
        return None if pid is None else cpu_seconds(pid)
    except OSError:
        return None


def baseline_lines(res: dict[str, Any]) -> list[str]:
    """Markdown: each `target@checkout` against `target` of this checkout, cell by cell."""
    raw: dict[str, dict[str, list[dict[str, Any]]]] = res["raw"]
    pairs = [(name.partition("@")[0], name) for name in res["targets_run"] if "@" in name]
    pairs = [(this, base) for this, base in pairs if this in raw]
    if not pairs:
        return []
    lines = [
        "| cell | this | baseline | req/s this / baseline, round by round | median | "
        "CPU µs/request this / baseline | median |",
        "|---" * 7 + "|",
    ]
    for this, base in pairs:
        for cell, runs in raw[this].items():
            rounds = [
                (a, b) for a, b in zip(runs, raw[base].get(cell, []), strict=False) if "error" not in a | b
            ]
            if not rounds:
                continue
            rps = [a["rps"] / b["rps"] for a, b in rounds if b["rps"]]
            cpu = [(a["cpu_us"], b["cpu_us"]) for a, b in rounds if a.get("cpu_us") and b.get("cpu_us")]
            cpu_text = ", ".join(f"{a:.0f}/{b:.0f}" for a, b in cpu)
            cpu_ratio = f"{statistics.median(a / b for a, b in cpu):.2f}x" if cpu else "—"
            lines.append(
                f"| {cell} | {this} | {base} | {', '.join(f'{r:.2f}' for r in rps)} | "
                f"**{statistics.median(rps):.2f}x** | {cpu_text} | {cpu_ratio} |"
            )
    return lines

"""A/B against other checkouts for ``benchmarks.throughput.run --baseline DIR``: the CPU a target's process
spends per request (read from ``/proc``, steadier than req/s on a shared machine: it does not count
the time the process waited for a core), and a table of this checkout against each baseline, the
ratio taken round by round (the two ran one after the other in each round) and its median given.
"""

from __future__ import annotations

import os
import statistics
from typing import Any


def cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU seconds the process `pid` has used so far (None if it cannot be read)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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

"""What Linux's `/proc` says of a running process: the CPU time it has used (every thread of it), its
resident memory, its open descriptors. CPU time, not wall time, is what tests and benchmarks compare
on a shared machine: it does not count the time a process waited for a core."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(*pids: int) -> float:
    """User plus system CPU seconds the processes `pids` have used so far, all threads counted."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime and stime, the stat's fields 14 and 15
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    """The process's resident memory (`VmRSS`), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def fd_count(pid: int) -> int:
    """How many file descriptors the process has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))

"""The client connection cap within the process's file descriptors, decided once at start-up.

Every open client connection, pooled upstream connection, probe of the reserve and file is a
descriptor. When they run out, `accept()` fails: asyncio stops accepting for a second at a time,
and clients past the cap get no answer at all instead of the 503 the cap promises (1,100 stalled
connections under `ulimit -n 1024` with the default cap of 1,000 and a pool of 512). So, as a Go
program raises its soft limit and nginx takes `worker_rlimit_nofile`, the soft limit is raised to
what the settings need when the hard limit allows it; when it does not, the cap is lowered to what
the descriptors hold beside the upstream pool and the probe reserve, and a warning says so. The pool
never holds more connections than there are client requests to send (each sends one at a time, and
an idle pooled connection was one's), so a cap and a pool that together fit are `cap + min(pool,
cap)`: a pool larger than the cap leaves it half the room. `OTHER_DESCRIPTORS` is what the rest may hold at once: the
process's own (about 20: the loop, pipes, logs, the fork server's), Redis, tokenizer files, and the
connections accepted in one burst past the cap, each open until its 503 is written.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

OTHER_DESCRIPTORS = 128


@dataclass(frozen=True, slots=True)
class Fitted:
    """The cap to use, the descriptor limit it was fitted to, and why it moved (empty: it did not)."""

    cap: int
    limit: int
    warning: str = ""


def fit_cap(cap: int, pool: int, reserve: int) -> Fitted:
    """The client connection cap for `pool` upstream connections and `reserve` probe connections,
    the soft descriptor limit raised first as far as needed and allowed."""
    return fitted_cap(cap, pool, reserve, raise_limit(cap + pool + reserve + OTHER_DESCRIPTORS))


def raise_limit(needed: int) -> int:
    """The soft descriptor limit, raised to `needed` or as near as the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return needed if soft == resource.RLIM_INFINITY else soft
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    except (ValueError, OSError):
        return soft
    return raised


def fitted_cap(cap: int, pool: int, reserve: int, limit: int) -> Fitted:
    """The largest cap whose connections, and as many pooled ones at most, fit `limit` descriptors."""
    if cap + pool + reserve + OTHER_DESCRIPTORS <= limit:
        return Fitted(cap, limit)
    room = limit - reserve - OTHER_DESCRIPTORS
    fitted = max(1, room - pool, room // 2)
    warning = (
        f"COMPACT_MAX_CLIENT_CONNECTIONS lowered from {cap} to {fitted}: the process may open "
        f"{limit} files (ulimit -n), which must also hold up to COMPACT_MAX_CONNECTIONS={pool} upstream "
        f"connections, {reserve} probe connections and {OTHER_DESCRIPTORS} others; raise the limit "
        "to keep the cap"
    )
    return Fitted(fitted, limit, warning)

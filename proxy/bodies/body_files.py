"""The files a huge body crosses between the proxy and the child that parses it (`split_parse.py`),
and the tie that ends that child with the proxy.

A body and its pieces go through memory-backed files (`/dev/shm` where it is writable): written by
the kernel with the GIL released, where pickling 15 MB would hold it for 20 ms. They hold the
client's request text, so each is created by its owner alone, readable by no other user (0600), and
removed on every path: after the parse, when a write fails half-way (a full `/dev/shm`), when the
request is given up while the child still works, by the child itself once the proxy is gone, and at
the next start for a proxy killed in between (each name carries its proxy's pid).

A child's parent is the fork server, which outlives the proxy while a child lives; and an idle pool
worker waits on a queue the proxy's death does not close. So each worker watches the proxy process
(`tether`) and exits as soon as it is gone, removing the files of the body it serves; the fork
server and the resource tracker then see their last client go and exit too.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import tempfile
import threading
import time

SHARED_MEMORY = "/dev/shm"
PREFIX = "compacting-proxy-"
OUT = ".out"  # the pieces' bytes, beside the body's file
_OURS = re.compile(re.escape(PREFIX) + r"(\d+)-[^/]*\.json(?:\.out)?$")
_SERVING: list[str] = []  # in a child: the file of the body it is parsing


def directory() -> str | None:
    """Where the files go: `/dev/shm` when writable, else the temporary directory."""
    return SHARED_MEMORY if os.access(SHARED_MEMORY, os.W_OK) else None


def write(raw: bytes) -> str:
    """`raw` in a new file (0600) named for this process; nothing left if the write fails."""
    handle, path = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", suffix=".json", dir=directory())
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(raw)
    except BaseException:
        remove(path)
        raise
    return path


def write_out(path: str, data: bytes | bytearray) -> None:
    """The pieces of the body at `path`, beside it (0600, a new file); nothing left on failure."""
    out = path + OUT
    try:
        with os.fdopen(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
            file.write(data)
    except BaseException:
        remove(path)
        raise


def read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def remove(path: str) -> None:
    """The body's file and its pieces', whichever exist."""
    for name in (path, path + OUT):
        with contextlib.suppress(OSError):
            os.unlink(name)


def sweep() -> None:
    """Remove the files of proxies that are gone (killed before they could): at start-up."""
    where = directory() or tempfile.gettempdir()
    with contextlib.suppress(OSError), os.scandir(where) as entries:
        for entry in entries:
            if (match := _OURS.match(entry.name)) and not _alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def serving(path: str) -> None:
    """In a child: `path` is the body it parses (removed if the proxy dies meanwhile)."""
    _SERVING[:] = [path]


def tether(proxy_pid: int) -> None:
    """A pool worker's initializer: the worker exits once the proxy process is gone."""
    threading.Thread(target=_exit_with, args=(proxy_pid,), daemon=True, name="tether").start()


def _exit_with(pid: int) -> None:
    try:
        watched = os.pidfd_open(pid)  # readable once the process has exited (Linux 5.3)
        select.select([watched], [], [])
    except (OSError, AttributeError):  # gone already, or no pidfd here: asked every second
        while _alive(pid):
            time.sleep(1)
    for path in _SERVING:
        remove(path)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process of that number: not ours to judge
    return True

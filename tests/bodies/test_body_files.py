"""The files a huge body crosses to its child (`proxy/bodies/body_files.py`): readable by their owner
alone, and nothing left when a write fails half-way (a full /dev/shm: here a file-size limit)."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from proxy.bodies import body_files


@contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(body_files, "SHARED_MEMORY", str(tmp_path))
    return tmp_path


def test_the_files_are_the_owners_alone_and_named_for_the_proxy(shared: Path) -> None:
    path = body_files.write(b'{"a": 1}')
    body_files.write_out(path, b"[1]")
    assert Path(path).name.startswith(f"compacting-proxy-{os.getpid()}-")
    assert {p.stat().st_mode & 0o777 for p in shared.iterdir()} == {0o600}
    body_files.remove(path)
    assert not list(shared.iterdir())


def test_a_write_that_fails_half_way_leaves_nothing(shared: Path) -> None:
    with file_size_limit(1024), pytest.raises(OSError):
        body_files.write(b" " * 4096)
    assert not list(shared.iterdir())
    path = body_files.write(b"{}")
    with file_size_limit(1024), pytest.raises(OSError):
        body_files.write_out(path, b" " * 4096)
    assert not list(shared.iterdir())


def test_the_files_of_a_proxy_that_is_gone_are_swept(shared: Path) -> None:
    mine = body_files.write(b"{}")
    gone = shared / f"compacting-proxy-{2**22 + 17}-abc.json"  # over any pid_max: no such process
    gone.write_bytes(b"{}")
    Path(str(gone) + ".out").write_bytes(b"[]")
    other = shared / "someone-else.json"
    other.write_bytes(b"{}")
    body_files.sweep()
    assert sorted(p.name for p in shared.iterdir()) == sorted([Path(mine).name, other.name])

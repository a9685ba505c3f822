"""A tool from PyPI installed once in a venv of its own (its exact pins would disturb the
project's), cached outside the repo and keyed by version::

    $COMPACT_LLAMA_CACHE (default ~/.cache/compacting-proxy)/
        <name>-<version>/bin/<command>      the command
        <name>-<version>.lock               held while installing

A venv names its own path in its scripts, so it is made in place, under the lock, and marked
complete at the end (`.complete`): an interrupted install is removed and made again. `aider_venv.py`
(the agent-CLI tests) and `litellm_venv.py` (the gateway tier) are the two tools.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("COMPACT_LLAMA_CACHE") or Path.home() / ".cache" / "compacting-proxy")


@dataclass(frozen=True)
class PinnedVenv:
    name: str  # the venv's name in the cache
    version: str
    requirements: tuple[str, ...]  # what pip installs, pinned
    command: str  # the command the tests run

    @property
    def venv_dir(self) -> Path:
        return cache_dir() / f"{self.name}-{self.version}"

    @property
    def binary_path(self) -> Path:
        return self.venv_dir / "bin" / self.command

    def is_installed(self) -> bool:
        return (self.venv_dir / ".complete").exists() and self.binary_path.exists()

    def ensure(self) -> Path:
        """The command, installed first if needed (a few minutes, once per machine)."""
        if self.is_installed():
            return self.binary_path
        cache_dir().mkdir(parents=True, exist_ok=True)
        with open(cache_dir() / f"{self.name}-{self.version}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another caller may be installing it: wait for that
            if self.is_installed():
                return self.binary_path
            shutil.rmtree(self.venv_dir, ignore_errors=True)  # an interrupted install
            python = os.environ.get("PINNED_VENV_PYTHON", sys.executable)
            subprocess.run([python, "-m", "venv", str(self.venv_dir)], check=True)
            pip = [str(self.venv_dir / "bin" / "python"), "-m", "pip", "install", "--quiet"]
            subprocess.run([*pip, "--disable-pip-version-check", *self.requirements], check=True)
            (self.venv_dir / ".complete").write_text(self.version)
        return self.binary_path

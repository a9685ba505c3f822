"""Install (once) and locate aider (`aider-chat` from PyPI) for the agent-CLI tests, in a venv of its
own: its many exact pins would disturb the project's. Cached outside the repo, keyed by version::

    $COMPACT_LLAMA_CACHE (default ~/.cache/compacting-proxy)/
        aider-<version>/bin/aider      the command
        aider-<version>.lock           held while installing

A venv names its own path in its scripts, so it is made in place, under the lock, and marked
complete at the end (`.complete`): an interrupted install is removed and made again.

Usage: ``python scripts/aider_venv.py install`` (prints the command's path) or ``... path``.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

AIDER_VERSION = "0.86.2"


def cache_dir() -> Path:
    return Path(os.environ.get("COMPACT_LLAMA_CACHE") or Path.home() / ".cache" / "compacting-proxy")


def venv_dir() -> Path:
    return cache_dir() / f"aider-{AIDER_VERSION}"


def binary_path() -> Path:
    return venv_dir() / "bin" / "aider"


def is_installed() -> bool:
    return (venv_dir() / ".complete").exists() and binary_path().exists()


def ensure_aider() -> Path:
    """The aider command, installed first if needed (a few minutes, once per machine)."""
    if is_installed():
        return binary_path()
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f"aider-{AIDER_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another caller may be installing it: wait for that
        if is_installed():
            return binary_path()
        shutil.rmtree(venv_dir(), ignore_errors=True)  # an interrupted install
        python = os.environ.get("AIDER_PYTHON", sys.executable)
        subprocess.run([python, "-m", "venv", str(venv_dir())], check=True)
        pip = [
            str(venv_dir() / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]
        subprocess.run([*pip, f"aider-chat=={AIDER_VERSION}"], check=True)
        (venv_dir() / ".complete").write_text(AIDER_VERSION)
    return binary_path()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "path"])
    args = parser.parse_args()
    print(ensure_aider() if args.command == "install" else binary_path())


if __name__ == "__main__":
    main()

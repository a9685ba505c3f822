"""Install (once) and locate aider (`aider-chat` from PyPI) for the agent-CLI tests, in a venv of its
own (`pinned_venv.py`): its many exact pins would disturb the project's.

Usage: ``python -m scripts.aider_venv install`` (prints the command's path) or ``... path``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scripts.pinned_venv import PinnedVenv

AIDER_VERSION = "0.86.2"
AIDER = PinnedVenv("aider", AIDER_VERSION, (f"aider-chat=={AIDER_VERSION}",), "aider")


def binary_path() -> Path:
    return AIDER.binary_path


def is_installed() -> bool:
    return AIDER.is_installed()


def ensure_aider() -> Path:
    """The aider command, installed first if needed (a few minutes, once per machine)."""
    return AIDER.ensure()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "path"])
    args = parser.parse_args()
    print(ensure_aider() if args.command == "install" else binary_path())


if __name__ == "__main__":
    main()

"""Gemini CLI's home for one `run` session: the user's own, seen through a private folder whose only
file of `run`'s is the user settings file.

Gemini CLI 0.61 takes the API-key auth type (which a base URL needs: FACTS.md) only from a settings
file. A system settings file (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`) is read only if it and every folder
above it are owned by root and writable by no group or other (its `isFileAndDirectorySecureSync`):
one under the default temporary directory (/tmp, mode 1777) is skipped, and so is any file a user
other than root writes, wherever it is. The user settings file is found under `GEMINI_CLI_HOME`
(else the home directory): `run` points that at a folder of its own (mode 0700) that mirrors the
user's home entry by entry (symlinks), and whose `.gemini` mirrors the user's `~/.gemini` the same
way but for `settings.json`: the user's settings with `run`'s on top.

What the CLI writes through a link lands in the user's own file. What it creates anew in `.gemini`
(a first session's chats, its project list) or replaces there (a file written by rename) is moved
into the user's `~/.gemini` when the CLI has exited, where it would have written it without `run`.
A setting changed during the session is the one thing not kept: it went to `run`'s settings file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GEMINI_DIR = ".gemini"
SETTINGS = "settings.json"
# Gemini CLI reads its settings as JSON with comments (strip-json-comments, then JSON.parse).
_STRING_OR_COMMENT = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.DOTALL)


def user_settings(path: Path) -> dict[str, Any]:
    """The settings in `path` as Gemini CLI reads them, or none when there are none it could read."""
    try:
        text = path.read_text(encoding="utf-8")
        value = json.loads(_STRING_OR_COMMENT.sub(lambda m: m.group(1) or "", text))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` laid on `base`, object by object."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def _mirror(source: Path, into: Path, *, skip: str) -> None:
    """A symlink in `into` for each entry of `source` but `skip`."""
    try:
        entries = list(os.scandir(source))
    except OSError:
        return
    for entry in entries:
        if entry.name != skip:
            (into / entry.name).symlink_to(entry.path)


def lay_out(real_home: Path, home: Path, settings: Mapping[str, Any]) -> None:
    """`home` (a new folder of the caller's) as the user's `real_home` with `settings` laid over the
    user's Gemini CLI settings."""
    home.chmod(0o700)
    _mirror(real_home, home, skip=GEMINI_DIR)
    gemini = home / GEMINI_DIR
    gemini.mkdir(mode=0o700)
    _mirror(real_home / GEMINI_DIR, gemini, skip=SETTINGS)
    laid = merged(user_settings(real_home / GEMINI_DIR / SETTINGS), settings)
    (gemini / SETTINGS).write_text(json.dumps(laid, indent=2) + "\n", encoding="utf-8")


def bring_back(real_home: Path, home: Path) -> list[str]:
    """Move what the CLI created or replaced in `home`'s `.gemini` into the user's; the names moved.
    A folder the user has meanwhile (another session made it) is left as it is."""
    gemini, target = home / GEMINI_DIR, real_home / GEMINI_DIR
    moved: list[str] = []
    try:
        entries = [e for e in os.scandir(gemini) if e.name != SETTINGS and not e.is_symlink()]
    except OSError:
        return moved
    for entry in entries:
        destination = target / entry.name
        if entry.is_dir(follow_symlinks=False) and destination.exists():
            continue
        target.mkdir(mode=0o700, exist_ok=True)
        if destination.is_symlink() or destination.is_file():
            destination.unlink()
        shutil.move(entry.path, destination)
        moved.append(entry.name)
    return moved

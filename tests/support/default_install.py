"""The proxy as the default install runs it, started from the test venv that has every extra.

`./scripts/serve.sh`, the image and `pip install compacting-proxy` install the base dependencies of
`pyproject.toml` and nothing else; the suite's venv also has the `test`, `dev`, `tokenizers` and
`bench` extras, so a proxy started from it counts with vocabularies a user's proxy may not have. Here
the proxy process sees a view of the venv's `site-packages` holding only the distributions the base
dependencies need (their closure, markers and extras applied, read from the installed metadata): to
it the others are not installed at all (`import`, `importlib.util.find_spec` and `importlib.metadata`
agree). The view is a folder of symbolic links, made once per process, and swapped into `sys.path` by
a `sitecustomize` module that the proxy's `PYTHONPATH` puts first.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import sysconfig
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(sysconfig.get_paths()["purelib"])


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def base_distributions() -> set[str]:
    """The installed distributions the base dependencies need, their dependencies' too."""
    wanted = [
        Requirement(r)
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ]
    found: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        name = _name(requirement.name)
        if name in found:
            continue
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here (a platform's optional dependency)
        found.add(name)
        for text in requires:
            nested = Requirement(text)
            environment = {"extra": ""}
            if nested.marker is None or any(
                nested.marker.evaluate({**environment, "extra": extra}) for extra in ["", *requirement.extras]
            ):
                wanted.append(nested)
    return found


def _top_level(distribution: importlib.metadata.Distribution) -> set[str]:
    """The entries of `site-packages` a distribution owns: its packages, modules and metadata folder."""
    return {Path(str(path)).parts[0] for path in distribution.files or () if not str(path).startswith("..")}


@functools.cache
def _view() -> Path:
    keep = base_distributions()
    view = Path(tempfile.mkdtemp(prefix="default-install-"))
    owned = set()
    for distribution in importlib.metadata.distributions(path=[str(SITE)]):
        if _name(distribution.metadata["Name"]) in keep:
            owned |= _top_level(distribution)
    for entry in owned:
        if (SITE / entry).exists() and not entry.endswith(".pth"):
            (view / entry).symlink_to(SITE / entry)
    shim = view / "_shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        f"import sys\nsys.path[:] = [{str(view)!r} if p == {str(SITE)!r} else p for p in sys.path]\n"
    )
    return view


@contextmanager
def default_install_environment() -> Iterator[None]:
    """Processes started inside see the default install's `site-packages` (`PYTHONPATH` set for them)."""
    shim = str(_view() / "_shim")
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (shim, str(ROOT), before) if p)
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before

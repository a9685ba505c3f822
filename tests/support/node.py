"""The Node clients of `tests/node/` (the npm packages of other projects' SDKs, `npm ci --prefix
tests/node`), run as a user runs them: each script reads what to send from a file, prints JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def node_client(script: str, *args: str, needs: str, timeout: float) -> Any:
    """What `tests/node/<script>` printed, run with `args`: skipped without Node, a failure without
    its package `needs` installed, or when it fails."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"node is not installed: {script} cannot be run")
    if not (NODE_DIR / "node_modules" / needs).is_dir():
        pytest.fail(f"the Node clients are not installed: npm ci --prefix {NODE_DIR}", pytrace=False)
    run = subprocess.run(
        [node, str(NODE_DIR / script), *args], capture_output=True, text=True, timeout=timeout, cwd=NODE_DIR
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)

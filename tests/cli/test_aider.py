"""The real aider (``aider-chat`` 0.86 from PyPI, in its own venv: ``scripts/aider_venv.py``) in an edit
loop whose restored history overflows the server's 32k window, straight at the scripted model server
and through the real `compacting-proxy` process (issue 26, part 4). How the session is set up:
``tests/support/aider_runs.py``.
"""

from __future__ import annotations

import os

import pytest

from scripts.aider_venv import is_installed
from tests.support.aider_runs import SOURCE, AiderRun, run_aider
from tests.support.upstreams.aider_model import EDIT_LINE

pytestmark = [
    pytest.mark.cli,
    pytest.mark.timeout(600),
    # In CI (scripts/test.sh installs it) its absence is a failure, not a skip.
    pytest.mark.skipif(
        not is_installed() and os.environ.get("CI") != "true",
        reason="aider is not installed: python scripts/aider_venv.py install (scripts/test.sh does)",
    ),
]
WINDOW = 32_000


def explain(r: AiderRun) -> str:
    return f"exit {r.exit_code}, received {r.received}\n{r.output[-2000:]}"


def test_aider_finishes_its_edit_through_the_proxy_and_hits_its_token_limit_without() -> None:
    direct = run_aider(WINDOW, proxied=False)
    assert direct.history_tokens > WINDOW
    assert direct.over == 1 and direct.hit_the_limit, explain(direct)
    assert direct.edited == SOURCE, "no edit: aider stopped"

    r = run_aider(WINDOW, proxied=True)
    assert r.over == 0 and not r.hit_the_limit, explain(r)
    assert [x["kind"] for x in r.received] == ["edit"], explain(r)
    assert r.received[0]["tokens"] < WINDOW < direct.received[0]["tokens"]
    assert "Applied edit to hello.py" in r.output, explain(r)
    assert r.edited.startswith(SOURCE.rstrip("\n")) and r.edited.endswith(EDIT_LINE), r.edited

"""`compacting-proxy run gemini` with the real Gemini CLI (tests/clis), as a new user runs it: the
temporary directory at its default (/tmp, mode 1777, where Gemini CLI 0.61 skips a settings file),
`--upstream` a local Chat Completions server, so the proxy bridges the CLI's Gemini API requests to
it. The server is the scripted agent model made strict (`tests.support.upstreams.strict`): it
refuses, as OpenAI's API does, an assistant `tool_calls` that no `tool` message answers, which is
how the CLI's loop check (from its 30th turn on) ends its history. Every call, the CLI's own side
calls too, asks the upstream's model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import gemini_cli
from tests.support.agent_clis import RUN_MODEL, run_command

pytestmark = [
    pytest.mark.cli,
    pytest.mark.timeout(900),
    gemini_cli.NEEDS_GEMINI_CLI,
]
STEPS = 34  # past the 30th turn, when the CLI's loop check first asks the model
WINDOW = 64_000  # room for the CLI's ~10k-token prompt and the loop: the proxy compacts from ~51k


def test_run_gemini_answers_through_the_bridge_to_a_strict_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    before = lay_out_gemini_user(home)
    env = {"GEMINI_API_KEY": "users-key"}  # TMPDIR unset: /tmp
    r, log = run_command("gemini", WINDOW, steps=STEPS, tell_window=False, home=home, strict=True, env=env)
    explain = f"exit {r.exit_code}\n{r.output[-3000:]}\n--- proxy ---\n{log[-3000:]}"
    assert "Invalid auth method" not in r.output and "insecure" not in r.output, explain
    assert "deprecated" not in r.output.lower(), explain
    assert r.exit_code == 0 and r.finished, explain
    refused = r.recorded["refused"]
    assert refused == [], f"the strict server refused {refused}\n{explain}"
    received = r.recorded["received"]
    side = [x for x in received if x["kind"] == "json"]
    assert len(side) >= 1, f"the CLI's side calls (its loop check) reached the server\n{explain}"
    assert {x["model"] for x in received} == {RUN_MODEL}, "every call asks the upstream's model"
    assert {p: p.read_bytes() for p in before} == before, "the user's own files as they were"
    chats = list((home / ".gemini" / "tmp").rglob("session-*"))
    assert chats, "the session landed in the user's ~/.gemini, as without run"


def lay_out_gemini_user(home: Path) -> dict[Path, bytes]:
    """A user who has used Gemini CLI with Google's API: its settings (another auth type, a
    comment) and trusted folders."""
    gemini = home / ".gemini"
    gemini.mkdir()
    (gemini / "settings.json").write_text(
        '// my settings\n{"security": {"auth": {"selectedType": "oauth-personal"}}, "ui": {"theme": "ANSI"}}\n'
    )
    (gemini / "trustedFolders.json").write_text("{}\n")
    assert shutil.which("gemini", path=str(gemini_cli.GEMINI.parent))
    return {p: p.read_bytes() for p in gemini.iterdir()}

"""A note of real pytest output, made afresh: the venv's pytest run on a small failing project in a
temporary directory (`tests/support/pytest_project.py`), its report noted as the engine notes a
tool result (issue 37, row 4). The fast tier reads a captured report: `tests/engine/test_failures.py`."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.engine.notes import build_note
from tests.support.pytest_project import EXCEPTION_LINES, FIRST_FAILURE, run_pytest, write_project


def test_a_note_of_a_real_pytest_run_says_where_it_failed_and_why(tmp_path: Path) -> None:
    write_project(tmp_path)
    report = run_pytest(tmp_path)
    assert "4 failed, 2 passed" in report, report[-500:]
    note = build_note(report, tool="bash", arguments=json.dumps({"command": "python -m pytest tests"}))
    outcome = note.partition(" Outcome: ")[2].partition(". Outline: ")[0]
    assert outcome.startswith(FIRST_FAILURE + "; 4 failed, 2 passed in "), note
    assert [line for line in EXCEPTION_LINES if line not in outcome] == [], note

"""Where a run failed, as its note says it (issue 37, row 4): the first failure with its file:line,
and pytest's exception lines, on real pytest output (`tests/engine/fixtures/pytest_report.txt`, a run
of the venv's pytest captured by `tests/support/pytest_project.py`, which says how; the process tier
runs pytest afresh: `tests/process/test_pytest_notes.py`)."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.engine.failures import exception_lines, first_failure, is_pytest
from proxy.engine.notes import build_note
from tests.support.pytest_project import EXCEPTION_LINES, FIRST_FAILURE

REPORT = (Path(__file__).parent / "fixtures" / "pytest_report.txt").read_text()


def note_of(report: str) -> str:
    return build_note(report, tool="bash", arguments=json.dumps({"command": "python -m pytest tests"}))


def test_a_pytest_note_says_where_it_first_failed_and_its_exception_lines() -> None:
    # e02f76e kept 2 of the 4 exception lines and no failure with its line (`shop/billing.py:5:
    # KeyError` and `KeyError: 'INV-99999'` as two facts); 16efdaf the same 2.
    outcome = note_of(REPORT).partition(" Outcome: ")[2].partition(". Outline: ")[0]
    assert outcome.startswith(FIRST_FAILURE + "; 4 failed, 2 passed in ")
    assert all(line in outcome for line in EXCEPTION_LINES)
    assert "FAILED tests/test_billing.py::test_total_of_an_unknown_invoice" in outcome


def test_the_report_is_read_as_pytest_s() -> None:
    assert is_pytest(REPORT) and not is_pytest("collected 3 items, all fine\n")
    assert first_failure(REPORT) == FIRST_FAILURE
    assert exception_lines(REPORT) == list(EXCEPTION_LINES)


def test_a_traceback_fails_where_the_project_s_code_is_not_in_the_library() -> None:
    unittest = (
        "ERROR: test_large_delete (delete.tests.DeletionTests)\n"
        "Traceback (most recent call last):\n"
        '  File "/testbed/tests/delete/tests.py", line 343, in test_large_delete\n'
        "    self.assertNumQueries(25, Avatar.objects.all().delete)\n"
        '  File "/opt/miniconda3/envs/testbed/lib/python3.6/unittest/case.py", line 822, in assertEqual\n'
        "    raise self.failureException(msg)\n"
        "AssertionError: 22 != 25 : 22 queries executed, 25 expected\n"
    )
    assert first_failure(unittest) == (
        "/testbed/tests/delete/tests.py:343: AssertionError: 22 != 25 : 22 queries executed, 25 expected"
    )
    assert first_failure("no failure here\n") == ""

"""A small project whose tests fail four ways, and real pytest's report of it, for the notes' tests.

`tests/process/test_pytest_notes.py` runs the venv's pytest on it in a temporary directory; the
fast tier reads the report captured from such a run (`tests/engine/fixtures/pytest_report.txt`), made
by `python -m tests.support.pytest_project tests/engine/fixtures/pytest_report.txt` (pytest 9.2.0,
plugins off, the temporary directory's path written as `/work/shop`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

BILLING = """\
INVOICES = {"INV-88213": [129.0, 129.0]}


def total(invoice):
    return sum(INVOICES[invoice])


def discount(amount, rate):
    return round(amount * (1 - rate), 2)
"""

TESTS = """\
from shop.billing import discount, total


def test_total_of_a_known_invoice():
    assert total("INV-88213") == 258.0


def test_total_of_an_unknown_invoice():
    assert total("INV-99999") == 0


def test_discount():
    assert discount(129.0, 0.1) == 116.0


def test_discount_of_nothing():
    assert discount(0, 0.5) == 0


def test_rate_must_be_a_number():
    assert discount(10, "0.1") == 9


def test_two_invoices_match():
    assert [total("INV-88213")] * 2 == [258.0, 259.0]
"""
# What the note must say: where the first failure was raised, with the test's own line, and the
# exception lines (pytest's `E` lines that state an error), as pytest prints them.
FIRST_FAILURE = "shop/billing.py:5: KeyError: 'INV-99999' (from tests/test_billing.py:9)"
EXCEPTION_LINES = (
    "KeyError: 'INV-99999'",
    "assert 116.1 == 116.0",
    "TypeError: unsupported operand type(s) for -: 'int' and 'str'",
    "assert [258.0, 258.0] == [258.0, 259.0]",
)
ROOT = "/work/shop"  # where the captured report says the project was


def write_project(root: Path) -> None:
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "billing.py").write_text(BILLING)
    (root / "tests").mkdir()
    (root / "tests" / "test_billing.py").write_text(TESTS)


def run_pytest(root: Path) -> str:
    """Real pytest's report of the project at `root` (its stdout and stderr), plugins off."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--color=no", "tests"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        write_project(Path(folder))
        report = run_pytest(Path(folder)).replace(folder, ROOT)
    Path(sys.argv[1]).write_text(report)

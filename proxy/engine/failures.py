"""Where a test run or a program failed: the first failing assertion with its file:line, and the
exception lines of a pytest report.

The next step after a failed run goes to the place that failed: pytest names it after each failure
(`tests/test_fields.py:41: AssertionError`, its `E ...` lines just above), a Python traceback in its
last frame before the exception line (`File "src/x.py", line 1461`). The note says that place with
the error (`tests/test_fields.py:41: AssertionError: assert 344 == 345`) among the run's outcome.
Every pattern is anchored at a line start and linear in what it reads, and each runs only where its
words occur; the caller passes at most `SCAN_CHARS` of a result.
"""

from __future__ import annotations

import re

from proxy.engine.scanning import shorten

FAILURE_CHARS = 200

# pytest's line after a failure's traceback: the path, the line and the exception's name.
_LOCATION = re.compile(r"^([^\s:\"']+?\.py):([0-9]++): ((?:[\w.]+\.)?[A-Z]\w*+)$", re.M)
# An `E` line that states the error: an exception's name and message, an assert, `Failed: ...`.
_STATED = re.compile(
    r"^E[ \t]++((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failed|Warning)\b[^\n]*+|assert [^\n]++|Failed: [^\n]++)",
    re.M,
)
_E_LINE = re.compile(r"^E[ \t]++(\S[^\n]*+)", re.M)
# A frame of pytest's long traceback: `tests/test_x.py:9: ` or `src/x.py:41: in total`.
_FRAME_LOCATION = re.compile(r"^([^\s:\"']+?\.py):([0-9]++):(?: in \w++)?[ \t]*+$", re.M)
_FRAME = re.compile(r'^[ \t]*+File "([^"\n]++)", line ([0-9]++)', re.M)
_LIBRARY = ("/lib/python", "site-packages", "<frozen ")
_RAISED = re.compile(r"^((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::[^\n]*+)?)$", re.M)


def is_pytest(text: str) -> bool:
    """Whether `text` is a pytest report (its header, or a failure's location line)."""
    return "test session starts" in text or ("\nE " in text and _LOCATION.search(text) is not None)


def first_failure(text: str) -> str:
    """`path:line: error` of the first failure pytest reports, else of a traceback's exception
    (its last frame before the exception line); nothing when `text` holds neither."""
    if "\nE " in text and (at := _LOCATION.search(text)):
        path, line, name = at.groups()
        block = text.rfind("\n__", 0, at.start())  # the failure's `____ test_x ____` (not `_ _ _`)
        stated = _STATED.search(text, max(0, block), at.start()) or _E_LINE.search(
            text, max(0, block), at.start()
        )
        error = stated.group(1).strip() if stated else name
        if not error.startswith(name) and not error.startswith("Failed"):
            error = f"{name}: {error}"
        # Raised below the test (in the code it calls): the test's own line too.
        test = _FRAME_LOCATION.search(text, max(0, block), at.start())
        called = f" (from {test[1]}:{test[2]})" if test and (test[1], test[2]) != (path, line) else ""
        return shorten(f"{path}:{line}: {error}", FAILURE_CHARS - len(called)) + called
    if "Traceback" in text and (raised := _RAISED.search(text, text.find("Traceback"))):
        frames = _FRAME.findall(text, text.find("Traceback"), raised.start())
        # The last frame of the project's own code (unittest's `case.py` says nothing of the test).
        own = [frame for frame in frames if not any(part in frame[0] for part in _LIBRARY)]
        if frames:
            path, line = (own or frames)[-1]
            return shorten(f"{path}:{line}: {raised.group(1).strip()}", FAILURE_CHARS)
    return ""


def exception_lines(text: str) -> list[str]:
    """The `E` lines of a pytest report that state an error, each once, in order."""
    if "\nE " not in text:
        return []
    return list(dict.fromkeys(match.strip() for match in _STATED.findall(text)))

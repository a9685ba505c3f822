"""What a tool run came to, the first thing its note says: the exit status, the success or failure
line, the test counts and the error.

An agent's next step depends first on whether the last command worked: "Successfully installed
marshmallow-3.13.0", "3 passed, 1 failed", a Traceback's last line, `error: ...`, `FAILED tests/x.py::t`,
`<returncode>1</returncode>`. Each kind is looked for only where its words occur, every pattern is
anchored at a line start and linear in what it reads, and the caller passes at most `SCAN_CHARS` of a
result (its head and tail), so an outcome costs the same bounded time for any size.
"""

from __future__ import annotations

import re

from proxy.engine.failures import exception_lines, first_failure
from proxy.engine.outline import EXIT_STATUS, SUMMARY_LINE
from proxy.engine.scanning import shorten

OUTCOME_CHARS = 300
ITEM_CHARS = 120

# mini-swe-agent's observation template; other agents and shells say it in words.
_RETURNCODE = re.compile(r"<returncode>(-?[0-9]++)</returncode>")
_SUCCESS = re.compile(
    r"^[ \t]*+((?:Successfully (?:installed|built|uninstalled|tagged|created|compiled)|All checks passed|"
    r"Ran [0-9]++ tests? in|Installed [0-9]++ packages?|Finished |Build succeeded|BUILD SUCCESSFUL|"
    r"OK(?= \(|$)|FAILED \((?:failures|errors)=)[^\n]{0,200}+)",
    re.M,
)
_SUCCESS_WORDS = ("Successfully", "All checks", "Ran ", "Installed ", "Finished ", "Build succeeded",
                  "BUILD SUCCESSFUL", "OK", "FAILED (")  # fmt: skip
# `FAILED tests/x.py::t` (pytest's summary) or `tests/x.py::t FAILED` (verbose), `::` checked after.
TEST_ID = re.compile(r"^(?:FAILED|ERROR)[ \t]++(\S++)|^(\S++)[ \t]++(?:FAILED|ERROR)\b", re.M)
# A Traceback's last line (`E   ` in pytest's report), or a tool's `error: ...` / `fatal: ...` line.
EXCEPTION_LINE = re.compile(
    r"^(?:E[ \t]++)?((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::[^\n]*+)?)$", re.M
)
_ERROR_LINE = re.compile(
    r"^[ \t]*+((?:[\w.\-/]++: )?(?:error|Error|ERROR|fatal|FATAL)(?:\[\w+\])?: [^\n]++)", re.M
)


def outcome(text: str, chars: int = OUTCOME_CHARS) -> str:
    """The outcome of a run, as a note writes it, within `chars` (nothing when the result says none)."""
    parts = outcome_parts(text)
    if not parts:
        return ""
    chosen: list[str] = []
    used = 0
    for part in parts:
        if used + len(part) + 2 > chars:
            continue
        chosen.append(part)
        used += len(part) + 2
    return f" Outcome: {'; '.join(chosen)}." if chosen else ""


def outcome_parts(text: str) -> list[str]:
    """Exit status, success lines, where it first failed (`path:line: error`), test counts,
    exception lines (a pytest report's `E` lines that state an error, else a log's last two), error
    lines, failed test ids: in that order, each kind's last (a log ends on its verdict), duplicates
    once."""
    parts: list[str] = []
    status = _RETURNCODE.findall(text, 0, 200) or _last_status(text)
    if status:
        parts.append(f"exit status {status[-1]}")
    if any(word in text for word in _SUCCESS_WORDS):
        parts += [line.strip() for line in _SUCCESS.findall(text)[-2:]]
    failed_at = first_failure(text)
    if failed_at:
        parts.append(failed_at)
    if " passed" in text or " failed" in text or " error" in text:
        summaries = [line.strip() for line in SUMMARY_LINE.findall(text) if " in " in line or "," in line]
        parts += summaries[-1:]
    if stated := exception_lines(text):
        parts += [line for line in stated if line not in failed_at]
    elif "Error" in text or "Exception" in text or "Exit" in text or "Interrupt" in text:
        parts += [line.strip() for line in EXCEPTION_LINE.findall(text)[-2:] if line.strip() not in failed_at]
    if "rror: " in text or "rror[" in text or "ERROR: " in text or "atal: " in text or "FATAL: " in text:
        parts += [line.strip() for line in _ERROR_LINE.findall(text)[-2:]]
    if "FAILED" in text or "ERROR" in text:
        failed = [a or b for a, b in TEST_ID.findall(text) if (a and a[0] != "(") or "::" in b]
        parts += [f"FAILED {test_id}" for test_id in dict.fromkeys(failed)]
    return list(
        dict.fromkeys(part if part is failed_at else shorten(part, ITEM_CHARS) for part in parts if part)
    )


def _last_status(text: str) -> list[str]:
    lowered = text.lower()
    if "exit" in lowered or "returncode" in lowered or "return code" in lowered:
        return EXIT_STATUS.findall(text)
    return []

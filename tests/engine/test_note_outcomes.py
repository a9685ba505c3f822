"""Golden notes for the shapes of issue 24 item 3: a note says first what the run came to (exit status,
the success or failure line, the counts, the error), then the names the next step uses, and no noise
(grep's line numbers, cache paths, licence URLs, e-mail domains, sentences run together, `ls` sizes).

Each golden failed on 654dec9 (no outcome, and the noise this file names). A golden that changes
deliberately is rewritten here whole: `python -m tests.engine.test_note_outcomes` prints the current notes.
"""

from __future__ import annotations

import json

import pytest

from proxy.engine.notes import build_note, is_note

PIP = (
    "Collecting marshmallow==3.13.0\n"
    "  Downloading marshmallow-3.13.0-py2.py3-none-any.whl (47 kB)\n"
    "WARNING: The directory '/root/.cache/pip/wheels/8a/2f/0c1d' or its parent directory is not owned or is not "
    "writable by the current user. The cache has been disabled. Check the permissions and owner of that "
    "directory. If executing pip with sudo, you should use sudo's -H flag.\n"
    + "".join(
        f"Requirement already satisfied: dep{i}>=1.{i} in /usr/local/lib/python3.9/site-packages (from "
        f"marshmallow==3.13.0) (2.{i})\n"
        for i in range(12)
    )
    + "Installing collected packages: marshmallow\n"
    "  Attempting uninstall: marshmallow\n"
    "    Found existing installation: marshmallow 3.0.0\n"
    "    Uninstalling marshmallow-3.0.0:\n"
    "      Successfully uninstalled marshmallow-3.0.0\n"
    "Successfully installed marshmallow-3.13.0\n"
    "WARNING: Running pip as the 'root' user can result in broken permissions and conflicting behaviour with "
    "the system package manager, and the cache is unusable.It is recommended to use a virtual environment "
    "instead: https://pip.pypa.io/warnings/venv\n"
)
PYTEST = (
    "============================= test session starts ==============================\n"
    "platform linux -- Python 3.11.2, pytest-8.3.3, pluggy-1.5.0\n"
    "rootdir: /testbed\n"
    "collected 4 items\n\n"
    "tests/test_fields.py ..F.                                                 [100%]\n\n"
    "=================================== FAILURES ===================================\n"
    "__________________________ test_timedelta_precision ___________________________\n\n"
    "    def test_timedelta_precision():\n"
    "        field = fields.TimeDelta(fields.TimeDelta.MILLISECONDS)\n"
    '        obj = {"td": dt.timedelta(milliseconds=345)}\n'
    '>       assert field.serialize("td", obj) == 345\n'
    "E       AssertionError: assert 344 == 345\n"
    "E        +  where 344 = <bound method Field.serialize of <fields.TimeDelta(default=<marshmallow.missing>)>>\n\n"
    "tests/test_fields.py:41: AssertionError\n"
    "=========================== short test summary info ============================\n"
    "FAILED tests/test_fields.py::test_timedelta_precision - AssertionError: assert 344 == 345\n"
    "========================= 1 failed, 3 passed in 0.50s ==========================\n"
)
GREP = "".join(
    f"src/marshmallow/fields.py-{n - 1}-from marshmallow import utils\n"
    f"src/marshmallow/fields.py:{n}:def _serialize_timedelta(self, value, attr, obj, **kwargs):\n"
    f"src/marshmallow/fields.py-{n + 1}-    base_unit = dt.timedelta(**{{self.precision: 1}})\n--\n"
    for n in (80, 415, 1002)
) + "".join(
    f"src/marshmallow/{m}.py-15-from marshmallow.base import FieldABC\n"
    f"src/marshmallow/{m}.py:16:    timedelta_precision = fields.TimeDelta.SECONDS  # see https://www.apache.org/licenses/LICENSE-2.0 or mail dev@marshmallow.example.org\n--\n"
    for m in ("schema", "utils", "decorators")
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/testbed/reproduce.py", line 7, in <module>\n'
    '    print(td_field.serialize("td_field", obj))\n'
    '  File "/testbed/src/marshmallow/fields.py", line 1461, in _serialize\n'
    "    return int(value.total_seconds() / base_unit.total_seconds())\n"
    + "".join(
        f'  File "/testbed/src/marshmallow/layer{i}.py", line {100 + i}, in call_{i}\n    return call_{i + 1}(x)\n'
        for i in range(8)
    )
    + "TypeError: unsupported operand type(s) for /: 'NoneType' and 'float'\n"
)
GIT = (
    "On branch main\nChanges not staged for commit:\n"
    '  (use "git add <file>..." to update what will be committed)\n'
    '  (use "git restore <file>..." to discard changes in working directory)\n'
    "\tmodified:   src/marshmallow/fields.py\n\nUntracked files:\n"
    '  (use "git add <file>..." to include in what will be committed)\n\treproduce.py\n\n'
    "diff --git a/src/marshmallow/fields.py b/src/marshmallow/fields.py\n"
    "index 0b18e7d..f0a7e2c 100644\n--- a/src/marshmallow/fields.py\n+++ b/src/marshmallow/fields.py\n"
    "@@ -1458,7 +1458,7 @@ class TimeDelta(Field):\n"
    "         if value is None:\n             return None\n"
    "         base_unit = dt.timedelta(**{self.precision: 1})\n"
    "-        return int(value.total_seconds() / base_unit.total_seconds())\n"
    "+        return int(round(value.total_seconds() / base_unit.total_seconds()))\n"
    "\n     def _deserialize(self, value, attr, data, **kwargs):\n         try:\n"
    + "             value = int(value)\n"
    * 6
)
LS = (
    "total 96\n"
    + "".join(
        f"-rw-r--r-- 1 root root {1000 + 37 * i:5} Nov 14 22:13 {name}\n"
        for i, name in enumerate(
            [
                "AUTHORS.rst",
                "CHANGELOG.rst",
                "CONTRIBUTING.rst",
                "LICENSE",
                "MANIFEST.in",
                "NOTICE",
                "README.rst",
                "RELEASING.md",
                "azure-pipelines.yml",
                "pyproject.toml",
                "setup.cfg",
                "setup.py",
                "tox.ini",
            ]
        )
    )
    + "".join(
        f"drwxr-xr-x 2 root root  4096 Nov 14 22:13 {d}\n"
        for d in ("docs", "examples", "performance", "src", "tests")
    )
)

COMMANDS = {
    "pip": "pip install marshmallow==3.13.0",
    "pytest": "python -m pytest tests/test_fields.py",
    "grep": "grep -rn -C1 timedelta src",
    "traceback": "python reproduce.py",
    "git": "git status && git diff",
    "ls": "ls -la",
}
RESULTS = {"pip": PIP, "pytest": PYTEST, "grep": GREP, "traceback": TRACEBACK, "git": GIT, "ls": LS}

GOLDEN = {
    "pip": (
        '[Truncated to save context: bash({"command":"pip install marshmallow==3.13.0"}) returned 2'
        ",272 chars. Outcome: Successfully uninstalled marshmallow-3.0.0; Successfully installed ma"
        "rshmallow-3.13.0. Preview: Collecting marshmallow==3.13.0 Downloading marshmallow-3.13.0-p"
        "y2.py3-none-any.whl (47 kB) WARNING: The directory '/root/.cache/pip/wheels/8a/2f/0c1d'… K"
        "ept: dep0; /usr/local/lib/python3.9/site-packages; dep2; dep3; dep4; dep5; dep6; dep7; dep"
        "8; dep9; dep10; dep11.]"
    ),
    "pytest": (
        '[Truncated to save context: bash({"command":"python -m pytest tests/test_fields.py"}) retu'
        "rned 1,067 chars. Outcome: tests/test_fields.py:41: AssertionError: assert 344 == 345; 1 f"
        "ailed, 3 passed in 0.50s; FAILED tests/test_fields.py::test_timedelta_precision. Outline: "
        "defines test_timedelta_precision. Kept: fields.TimeDelta; fields.TimeDelta.MILLISECONDS; d"
        "t.timedelta; field.serialize; Field.serialize; marshmallow.missing.]"
    ),
    "grep": (
        '[Truncated to save context: bash({"command":"grep -rn -C1 timedelta src"}) returned 1,422 '
        "chars. Preview: src/marshmallow/fields.py-79-from marshmallow import utils src/marshmallow"
        "/fields.py:80:def _serialize_timedelta(self, value, attr, obj, **kwargs): sr… Outline: 4 f"
        "iles matched: src/marshmallow/fields.py, src/marshmallow/schema.py, src/marshmallow/utils."
        "py, src/marshmallow/decorators.py. Kept: base_unit; dt.timedelta; self.precision; marshmal"
        "low.base; FieldABC; timedelta_precision; fields.TimeDelta.SECONDS.]"
    ),
    "traceback": (
        '[Truncated to save context: bash({"command":"python reproduce.py"}) returned 1,027 chars. '
        "Outcome: /testbed/src/marshmallow/layer7.py:107: TypeError: unsupported operand type(s) fo"
        "r /: 'NoneType' and 'float'. Kept: /testbed/reproduce.py; td_field.serialize; /testbed/src"
        "/marshmallow/fields.py; 1461; value.total_seconds; /testbed/src/marshmallow/layer0.py; /te"
        "stbed/src/marshmallow/layer1.py; /testbed/src/marshmallow/layer2.py; /testbed/src/marshmal"
        "low/layer3.py; /testbed/src/marshmallow/layer4.py; /testbed/src/marshmallow/layer5.py; /te"
        "stbed/src/marshmallow/layer6.py.]"
    ),
    "git": (
        '[Truncated to save context: bash({"command":"git status && git diff"}) returned 1,046 char'
        's. Preview: On branch main Changes not staged for commit: (use "git add <file>..." to upda'
        'te what will be committed) (use "git restore <file>..." to discard chang… Outline: defines'
        " _deserialize. Kept: reproduce.py; a/src/marshmallow/fields.py; b/src/marshmallow/fields.p"
        "y; 0b18e7d..f0a7e2c; 100644; 1458; TimeDelta; dt.timedelta; self.precision; value.total_se"
        "conds; base_unit.total_seconds.]"
    ),
    "ls": (
        '[Truncated to save context: bash({"command":"ls -la"}) returned 957 chars. Preview: total '
        "96 -rw-r--r-- 1 root root 1000 Nov 14 22:13 AUTHORS.rst -rw-r--r-- 1 root root 1037 Nov 14"
        " 22:13 CHANGELOG.rst -rw-r--r-- 1 root root 1074 Nov 1… Kept: CONTRIBUTING.rst; LICENSE; M"
        "ANIFEST.in; NOTICE; README.rst; RELEASING.md; azure-pipelines.yml; pyproject.toml; setup.c"
        "fg; setup.py; tox.ini; docs; examples; performance; src; tests.]"
    ),
}


def note_of(shape: str) -> str:
    return build_note(RESULTS[shape], tool="bash", arguments=json.dumps({"command": COMMANDS[shape]}))


@pytest.mark.parametrize("shape", list(GOLDEN))
def test_golden_note(shape: str) -> None:
    assert note_of(shape) == GOLDEN[shape]
    assert is_note(GOLDEN[shape]), "a note with its outcome is still a note: never noted again"


@pytest.mark.parametrize(
    ("shape", "outcome"),
    [
        (
            "pip",
            "Outcome: Successfully uninstalled marshmallow-3.0.0; Successfully installed marshmallow-3.13.0.",
        ),
        (
            "pytest",
            "Outcome: tests/test_fields.py:41: AssertionError: assert 344 == 345; 1 failed, 3 passed in 0.50s; "
            "FAILED tests/test_fields.py::test_timedelta_precision.",
        ),
        (
            "traceback",
            "Outcome: /testbed/src/marshmallow/layer7.py:107: TypeError: unsupported operand type(s) for /: "
            "'NoneType' and 'float'.",
        ),
    ],
)
def test_the_outcome_comes_first(shape: str, outcome: str) -> None:
    assert note_of(shape).partition(" chars. ")[2].startswith(outcome)


@pytest.mark.parametrize(
    ("shape", "noise"),
    [
        ("pip", "/root/.cache/pip/wheels"),
        ("pip", "unusable.It"),
        ("pip", "pip.pypa.io/warnings"),
        ("grep", "-80-"),
        ("grep", "-15-"),
        ("grep", "fields.py-"),
        ("grep", "apache.org/licenses"),
        ("grep", "marshmallow.example.org"),
        ("ls", "; 1111;"),
        ("pip", "; 1.0;"),  # versions say nothing of what happened (issue 37, row 3)
        ("pip", "2.11"),
        ("pytest", "pluggy"),
    ],
)
def test_noise_is_not_kept(shape: str, noise: str) -> None:
    assert noise not in note_of(shape).partition(" Kept: ")[2]


def test_a_mini_swe_agent_exit_status_error_line_and_url_escapes() -> None:
    result = (
        "<returncode>1</returncode>\n<output>\n"
        + "GET /api/v1/items?q=%2Fsrv%2Fdata%2Fexport_items.csv 404\n" * 30
    )
    result += "error: could not find export_items.csv in /srv/data\n</output>"
    note = build_note(result, tool="bash", arguments='{"command": "python client.py"}')
    assert " Outcome: exit status 1; error: could not find export_items.csv in /srv/data." in note
    kept = note.partition(" Kept: ")[2]
    assert "2Fsrv" not in kept and "2Fdata" not in kept
    assert "Preview: GET /api/v1/items" in note, "the status is the outcome's, not the preview's"


def test_mini_swe_agents_warning_leaves_the_preview_to_the_output_and_source_lines_are_no_errors() -> None:
    warning = (
        "<warning>\nThe output of your last command was too long.\nPlease try a different command that "
        "produces less output.\n</warning>"
    )
    source = (
        "def load(path):\n    try:\n        return read_config(path)\n    except Exception:\n        raise\n"
    )
    result = f"<returncode>0</returncode>\n{warning}<output_head>\n{source * 80}</output_head>"
    note = build_note(result, tool="bash", arguments='{"command": "cat config_loader.py"}')
    assert " Outcome: exit status 0. Preview: def load(path):" in note
    assert "output_head" not in note, "mini-swe-agent's tags are no facts"
    assert "except Exception" not in note.partition(" Kept: ")[2]


if __name__ == "__main__":
    for name in GOLDEN:
        print(name, note_of(name), sep="\n", end="\n\n")

# ruff: noqa: RUF001  (the Chinese chat is written with Chinese punctuation, on purpose)
"""Agent trajectories in the exact wire shapes of mini-swe-agent and SWE-agent, from real tool output.

`bench_trajectories.py` replays them. Each trajectory is one agent fixing one bug (`trajectory_tasks`)
in a real source tree: the Starlette sources installed in the venv, copied into a temporary git
repository (an import commit, the task's tests, the commit that planted the bug; fixed authors and
dates, so the hashes are the same on every machine). Every observation is the real output of a
real command run on that tree by this module: `ls -la`, `find | sort`, `grep -rn | sort`,
`nl -ba FILE | sed -n 'A,Bp'`, `cat`, `wc -l`, `python -c` (with its tracebacks), the task's
`reproduce.py`, `python -m pytest` (failures, tracebacks, then the passing run), `git log`/`git show`/
`git diff`, edits. The agent is scripted but reacts to what it sees: it reads the file a `grep` hit
names, follows the names the code it read calls (found with `ast`), and its THOUGHTs quote the
paths, names, lines and errors of the outputs before them, as a model's do. Seeded (`random.Random`
on the framework, task and seed) and sorted, so a run is reproducible.

Shapes (read from the frameworks' repositories; prompt texts in `trajectory_templates.py`):

- mini-swe-agent v1.17.5 (commit 68d367bf0ccf40ad59a07101a94c21b66e7798ff): `agents/default.py`
  keeps a system message, the instance template with the task as the first user message, then
  per step an assistant message ("THOUGHT: ..." and exactly one ```bash block) and the command's
  observation as a *user* message in `config/extra/swebench.yaml`'s `action_observation_template`
  (`<returncode>`, `<output>`; output of 10,000 characters or more replaced by a warning, its first
  and last 5,000 characters and the elided count). `environments/local.py` runs `bash -c` with
  stderr folded into stdout. `models/litellm_model.py` sends only `role` and `content`. The last
  step is the submit command; its output is not sent to the model.
- SWE-agent (commit 3ea751c087f32b16e039a2233dd6eefecef325d5), `config/default.yaml`: function
  calling (`parse_function: function_calling`), tools `bash` and `str_replace_editor`
  (`tools/edit_anthropic`, with `USE_FILEMAP`) and `submit` (`tools/review_on_submit_m`: the first
  submit answers with the review message and the diff). `agent/agents.py` adds the assistant's
  thought with `tool_calls` (one per step) and the observation as a `tool` message in
  `next_step_template` ("OBSERVATION:\\n...") or `next_step_no_output_template`; `agent/models.py`
  `_history_to_messages` writes `tool_call_id`; the `cache_control` history processor
  (`last_n_messages: 2`) turns the last two user/tool messages of each request into a text part
  with `cache_control`, on the message itself for `tool` messages. `str_replace_editor`'s outputs
  (`cat -n` numbering, the 16,000-character clip, the file map of big Python files with function
  bodies of 5 or more lines elided, the edit snippet) are reproduced by this module's own code, the
  map with `ast` where SWE-agent uses tree-sitter.

Normalised for reproducibility, and nothing else: the temporary directory reads `/testbed`, the
venv's prefix `/opt/miniconda3/envs/testbed` (SWE-bench's), pytest's duration `0.50s`, object
addresses `0x7f3a2c1b9e80`, file times a fixed date, the owner `root`; pytest loads no plugins of
the venv (`PYTEST_DISABLE_PLUGIN_AUTOLOAD`).
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.agents import trajectory_templates as tpl
from benchmarks.agents.trajectory_tasks import TASKS, Task

HERE = Path(__file__).resolve().parent

Message = dict[str, Any]
FRAMEWORKS = ("mini-swe-agent", "swe-agent")
TESTBED = "/testbed"
ENV_PREFIX = "/opt/miniconda3/envs/testbed"
PACKAGE = "starlette"
FIXED_TIME = 1_700_000_000  # 2023-11-14
MINI_OUTPUT_LIMIT = 10_000
EDITOR_LIMIT = 16_000
EDITOR_CLIPPED = (
    "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should "
    "retry this tool after you have searched inside the file with `grep -n` in order to find the line "
    "numbers of what you are looking for.</NOTE>"
)
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
MINI_WARNING = (
    "<warning>\nThe output of your last command was too long.\nPlease try a different command that produces "
    "less output.\nIf you're looking at a file you can try use head, tail or sed to view a smaller number of "
    "lines selectively.\nIf you're using grep or find and it produced too much output, you can use a more "
    "selective search pattern.\nIf you really need to see something from the full command's output, you can "
    "redirect output to a file and then search in that file.\n</warning>"
)


def _tool(name: str, description: str, arguments: list[dict[str, Any]]) -> dict[str, Any]:
    """An OpenAI tool as SWE-agent's `Command.get_function_calling_tool` builds it."""
    properties: dict[str, Any] = {}
    required = []
    for arg in arguments:
        properties[arg["name"]] = {"type": arg["type"], "description": arg["description"]}
        if "items" in arg:
            properties[arg["name"]]["items"] = arg["items"]
        if arg["required"]:
            required.append(arg["name"])
        if "enum" in arg:
            properties[arg["name"]]["enum"] = arg["enum"]
    parameters = (
        {"type": "object", "properties": properties, "required": required}
        if properties
        else {"type": "object"}
    )
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


SWE_TOOLS = [
    _tool(
        "bash",
        "runs the given command directly in bash",
        [
            {
                "name": "command",
                "type": "string",
                "description": "The bash command to execute.",
                "required": True,
            }
        ],
    ),
    _tool("str_replace_editor", tpl.EDITOR_DOCSTRING, tpl.EDITOR_ARGUMENTS),
    _tool("submit", "submits the current file", []),
]


@dataclass(slots=True)
class Trajectory:
    framework: str
    task: str
    seed: int
    messages: list[Message] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)  # len(messages) at each model call
    tools: list[dict[str, Any]] | None = None

    @property
    def name(self) -> str:
        return f"{self.framework}/{self.task}"

    @property
    def body(self) -> dict[str, Any]:
        """The request's fields besides `messages`."""
        body: dict[str, Any] = {"model": f"{self.framework}-replay"}
        if self.tools:
            body["tools"] = self.tools
        return body

    def request(self, k: int) -> list[Message]:
        """The messages of the k-th model call, as the framework sends them."""
        history = self.messages[: self.calls[k]]
        if self.framework != "swe-agent":
            return history
        return with_cache_control(history)


def with_cache_control(history: list[Message], last: int = 2) -> list[Message]:
    """SWE-agent's `cache_control` history processor: the last `last` user/tool messages get it."""
    out = list(history)
    marked = 0
    for i in range(len(out) - 1, -1, -1):
        if marked == last:
            break
        message = out[i]
        if message["role"] not in ("user", "tool"):
            continue
        marked += 1
        part: dict[str, Any] = {"type": "text", "text": message["content"]}
        if message["role"] == "tool":
            out[i] = {**message, "content": [part], "cache_control": {"type": "ephemeral"}}
        else:
            out[i] = {**message, "content": [{**part, "cache_control": {"type": "ephemeral"}}]}
    return out


# The source tree -----------------------------------------------------------------------------


def _git(root: Path, *args: str) -> None:
    env = {**_environment(root), "GIT_AUTHOR_DATE": "2025-03-04T10:00:00+00:00"}
    env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"]
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def _environment(root: Path) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root.parent),
        "LANG": "C.UTF-8",
        "PAGER": "cat",
        "MANPAGER": "cat",
        "LESS": "-R",
        "PIP_PROGRESS_BAR": "off",
        "TQDM_DISABLE": "1",
        "GIT_PAGER": "cat",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the header lists no plugins of the venv; starts fast
        "COLUMNS": "80",
        "GIT_AUTHOR_NAME": "Dana Maintainer",
        "GIT_AUTHOR_EMAIL": "dana@example.org",
        "GIT_COMMITTER_NAME": "Dana Maintainer",
        "GIT_COMMITTER_EMAIL": "dana@example.org",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }


def build_tree(root: Path, task: Task) -> None:
    """The task's repository: the installed sources, the tests, the planted bug, three commits."""
    import starlette

    source = Path(starlette.__file__).parent
    files = sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        target = root / PACKAGE / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    (root / "README.md").write_text(
        f"# {PACKAGE}\n\nA copy of the {PACKAGE} sources, for a bug-fix exercise.\n\n"
        "Run the tests with `python -m pytest tests`.\n"
    )
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", f"Import {PACKAGE} sources")
    (root / "tests").mkdir()
    (root / "tests" / "__init__.py").write_text("")
    (root / task.test_path).write_text(task.test_code)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", f"Tests for {task.symbol}")
    bugged = root / task.path
    text = bugged.read_text()
    assert text.count(task.good) == 1, (task.name, "the installed text changed")
    bugged.write_text(text.replace(task.good, task.bad))
    _git(root, "commit", "-q", "-am", task.commit)
    fix_times(root)


def fix_times(root: Path) -> None:
    """Every file and directory `ls -la` may show gets the same date."""
    for path in [root.parent, root, root / ".git", *root.rglob("*")]:
        if ".git" not in path.relative_to(root.parent).parts[1:] or path.name == ".git":
            os.utime(path, (FIXED_TIME, FIXED_TIME))


class Sandbox:
    """Runs commands in the tree and gives their output as the agent's environment reports it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = _environment(root)
        self.prefix = sys.prefix

    def host(self, path: str) -> Path:
        return self.root / path.removeprefix(TESTBED).lstrip("/")

    def normalise(self, text: str) -> str:
        text = text.replace(str(self.root), TESTBED).replace(self.prefix, ENV_PREFIX)
        text = re.sub(r"(?<=[ =])in \d+\.\d+s\b", "in 0.50s", text)
        text = re.sub(r"(?<= at )0x[0-9a-f]{6,}\b", "0x7f3a2c1b9e80", text)
        text = re.sub(r"(?m)^([-dlrwx]{10}\.? +\d+ )\S+ +\S+", r"\1root root", text)
        return text

    def run(self, command: str) -> tuple[int, str]:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=120,
        )
        fix_times(self.root)  # files the command wrote get the fixed date too
        return done.returncode, self.normalise(done.stdout)


# What the agent does, framework-neutral -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Action:
    kind: str  # bash | view | create | replace | submit
    command: str = ""
    path: str = ""
    view_range: tuple[int, int] | None = None
    text: str = ""
    old: str = ""
    new: str = ""


@dataclass(frozen=True, slots=True)
class Step:
    thought: str
    action: Action


def _names(path: Path) -> dict[str, tuple[int, int]]:
    """Top-level and method definitions of a Python file: name -> (first line, last line)."""
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError):
        return {}
    out: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.setdefault(node.name, (node.lineno, node.end_lineno or node.lineno))
    return out


class Agent:
    """The scripted engineer: explores, reproduces, reads the history, fixes, checks, submits.
    `steps()` yields one step at a time; `seen(output)` tells it what the step printed."""

    def __init__(self, task: Task, sandbox: Sandbox, rng: random.Random, chars: int, max_steps: int) -> None:
        self.task = task
        self.sandbox = sandbox
        self.rng = rng
        self.target_chars = chars
        self.max_steps = max_steps
        self.output = ""
        self.returncode = 0
        self.chars = 0
        self.count = 0
        self.index = self._index()
        self.visited: set[tuple[str, int]] = set()
        self.followed: set[str] = set()
        self.queue: list[str] = []

    def _index(self) -> dict[str, list[tuple[str, int, int]]]:
        index: dict[str, list[tuple[str, int, int]]] = {}
        for path in sorted((self.sandbox.root / PACKAGE).rglob("*.py")):
            rel = str(path.relative_to(self.sandbox.root))
            for name, (start, end) in _names(path).items():
                index.setdefault(name, []).append((rel, start, end))
        return index

    def seen(self, returncode: int, output: str) -> None:
        self.returncode, self.output = returncode, output
        self.chars += len(output) + 300
        self.count += 1

    # helpers
    def lines_of(self, path: str) -> int:
        return len(self.sandbox.host(path).read_text().split("\n"))

    def read(self, path: str, start: int, end: int) -> Action:
        end = min(end, self.lines_of(path))
        self.visited.add((path, start // 40))
        return Action("view", path=path, view_range=(max(1, start), end))

    def callees(self, path: str, start: int, end: int) -> list[str]:
        text = "\n".join(self.sandbox.host(path).read_text().split("\n")[start - 1 : end])
        found = re.findall(r"\b([A-Za-z_]\w{3,})\s*\(", text) + re.findall(r"import ([\w, ]+)", text)
        names = []
        for item in found:
            for name in (n.strip() for n in item.split(",")):
                if name in self.index and name not in self.followed and name not in names:
                    names.append(name)
        return names

    def span(self) -> tuple[int, int]:
        """The lines of the function the planted bug is in."""
        text = self.sandbox.host(self.task.path).read_text()
        line = text.split(self.task.bad)[0].count("\n") + 1
        spans = [
            (node.lineno, node.end_lineno or node.lineno)
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ]
        return min(spans, key=lambda span: span[1] - span[0])

    def budget_left(self) -> bool:
        return self.chars < self.target_chars and self.count < self.max_steps - 16

    def steps(self) -> Iterator[Step]:
        task, rng = self.task, self.rng
        module = task.path.removesuffix(".py").replace("/", ".")
        yield Step(
            "I need to understand the structure of the repository first. Let me check what files are in "
            "the current directory.",
            Action("bash", "ls -la"),
        )
        yield Step(
            f"This is the {PACKAGE} package with a tests directory. Let me list the Python sources to see "
            "how the package is organised.",
            Action("bash", f"find {PACKAGE} tests -name '*.py' | sort"),
        )
        sizes = f"wc -l {PACKAGE}/*.py {PACKAGE}/middleware/*.py | sort -n | tail -25"
        yield Step(
            f"The issue is about `{task.symbol}`. Before searching, let me see how big the modules are.",
            Action("bash", sizes),
        )
        for keyword in task.keywords:
            yield Step(
                f"Let me search for `{keyword}` across the package to find where it is handled.",
                Action("bash", f'grep -rn "{keyword}" {PACKAGE}/ | sort'),
            )
            hits = re.findall(r"^([\w/.]+\.py):(\d+):", self.output, re.M)
            if hits:
                path, line = hits[rng.randrange(len(hits))]
                line_no = int(line)
                if (path, line_no // 40) not in self.visited:
                    yield Step(
                        f"`{path}` line {line_no} matches `{keyword}`. Let me read the code around it.",
                        self.read(path, line_no - rng.randint(10, 30), line_no + rng.randint(90, 200)),
                    )
                    self.queue += self.callees(path, max(1, line_no - 30), line_no + 110)
        start, end = self.span()
        yield Step(
            f"The bug should be in `{task.symbol}` in `{task.path}` (lines {start}-{end}). Let me look at "
            "the whole file to see its context.",
            Action("view", path=task.path),
        )
        yield Step(
            f"Let me get an outline of the definitions in `{task.path}`.",
            Action("bash", f'grep -n "^class \\|    def \\|^def " {task.path}'),
        )
        yield from self.explore(module)
        yield from self.reproduce()
        yield from self.fix(start)

    def explore(self, module: str) -> Iterator[Step]:
        rng = self.rng
        mistakes = 0
        while self.budget_left():
            roll = rng.random()
            if not self.queue:
                name = rng.choice(sorted(self.index))
                self.queue.append(name)
            if roll < 0.08 and mistakes < 3:
                mistakes += 1
                yield from self.mistake(mistakes)
                continue
            if roll < 0.16:
                yield from self.probe(module)
                continue
            name = self.queue.pop(0)
            if name in self.followed:
                continue
            self.followed.add(name)
            if rng.random() < 0.5 or not self.index.get(name):
                yield Step(
                    f"`{name}` is used here. Let me find where it is defined.",
                    Action("bash", f'grep -rn "def {name}\\|class {name}" {PACKAGE}/ | sort'),
                )
                hits = re.findall(r"^([\w/.]+\.py):(\d+):", self.output, re.M)
            else:  # where it lives is plain from the import, or from the file list
                hits = [(path, str(line)) for path, line, _ in self.index[name]]
            if not hits:
                continue
            path, line = hits[0]
            places = [p for p in self.index.get(name, []) if p[0] == path]
            start, end = (places[0][1], places[0][2]) if places else (int(line), int(line) + 60)
            end = max(end, start + rng.randint(120, 260))  # the definition and what follows it
            thought = f"`{name}` is defined in `{path}` at line {line}."
            if len(hits) > 1:
                thought += f" There are {len(hits)} definitions; `{hits[1][0]}` has another one."
            if rng.random() < 0.5 and self.lines_of(path) < 700:
                yield Step(
                    f"{thought} The file is not long, let me read all of it.", Action("view", path=path)
                )
            else:
                yield Step(f"{thought} Let me read it.", self.read(path, start - rng.randint(0, 8), end))
            new = self.callees(path, start, end)
            rng.shuffle(new)
            self.queue += new[: rng.randint(1, 4)]

    def mistake(self, k: int) -> Iterator[Step]:
        task = self.task
        if k == 1:
            wrong = task.path.replace(".py", "s.py")
            yield Step(f"Let me check `{wrong}` as well.", Action("bash", f"cat {wrong}"))
            yield Step(
                f"That file does not exist (`No such file or directory`). The module is `{task.path}`. Let me "
                "check for other callers instead.",
                Action("bash", f'grep -rn "{task.symbol}(" {PACKAGE}/ tests/ | sort | head -40'),
            )
        elif k == 2:
            yield Step(
                "Let me check whether there is a changelog entry about this.",
                Action("bash", f'grep -rn "{task.symbol}" docs/ CHANGELOG.md'),
            )
        else:
            yield Step(
                "Let me run the task's test module directly with its old name.",
                Action("bash", f"python -m pytest {task.test_path.replace('.py', '_old.py')} -q"),
            )

    def probe(self, module: str) -> Iterator[Step]:
        rng, task = self.rng, self.task
        names = sorted(_names(self.sandbox.host(task.path)))
        name = rng.choice(names)
        choice = rng.randrange(4)
        if choice == 0:
            yield Step(
                f"Let me check the signature of `{name}` in `{module}` from Python.",
                Action(
                    "bash",
                    f"python -c \"import inspect, {module} as m; obj = getattr(m, '{name}', None); "
                    f'print(inspect.signature(obj) if callable(obj) else obj)"',
                ),
            )
        elif choice == 1:
            yield Step(
                f"Let me see the history of `{task.path}`.",
                Action("bash", f"git log --oneline --stat -5 -- {task.path}"),
            )
        elif choice == 2:
            yield Step(
                f"Let me look at how `{name}` is used across the package.",
                Action("bash", f'grep -rn "{name}" {PACKAGE}/ tests/ | sort | head -80'),
            )
        else:
            yield Step(
                f"Let me check that `{module}` imports cleanly and where it is loaded from.",
                Action(
                    "bash",
                    f'python -c "import {module} as m; print(m.__file__); print(sorted(vars(m))[:40])"',
                ),
            )

    def reproduce(self) -> Iterator[Step]:
        task = self.task
        yield Step(
            "I have a good picture of the code now. Let me write a script that reproduces the issue.",
            Action("create", path=f"{TESTBED}/reproduce.py", text=task.reproduce),
        )
        yield Step("Now let me run it.", Action("bash", "python reproduce.py"))
        error = re.findall(r"^(\w+(?:\.\w+)*(?:Error|Exception)):? ?(.*)$", self.output, re.M)
        where = re.findall(r'File "([^"]+)", line (\d+), in (\w+)', self.output)
        detail = ""
        if error:
            detail = f"It fails with `{error[-1][0]}`"
            if where:
                detail += f" raised in `{where[-1][2]}` ({where[-1][0]}, line {where[-1][1]})"
            detail += ". "
        elif self.output.strip():
            detail = f"It prints `{self.output.strip().splitlines()[-1][:80]}`, which is wrong. "
        yield Step(
            f"{detail}The repository has tests for this; let me run them.",
            Action("bash", f"python -m pytest {task.test_path} -q"),
        )
        failed = re.findall(r"^FAILED (\S+)", self.output, re.M)
        yield Step(
            f"{len(failed)} test(s) fail: {', '.join(f'`{f}`' for f in failed[:3])}. Let me run the first one "
            "verbosely to see the full traceback.",
            Action("bash", f"python -m pytest {failed[0] if failed else task.test_path} -vv 2>&1 | tail -60"),
        )
        yield Step(
            f"The failure points at `{task.path}`. Let me check its recent history; this looks like a "
            "regression.",
            Action("bash", f"git log --oneline -10 -- {task.path}"),
        )
        commits = re.findall(r"^([0-9a-f]{7,}) ", self.output, re.M)
        if commits:
            yield Step(
                f"Commit `{commits[0]}` is the latest change to `{task.path}`. Let me see what it changed.",
                Action("bash", f"git show {commits[0]}"),
            )

    def fix(self, start: int) -> Iterator[Step]:
        task = self.task
        yield Step(
            f"That commit changed `{task.symbol}`. The line `{task.bad.strip().splitlines()[0]}` is the "
            "cause. Let me look at the lines once more before editing.",
            self.read(task.path, start - 3, start + 30),
        )
        yield Step(
            f"I'll restore the correct behaviour in `{task.symbol}`.",
            Action("replace", path=f"{TESTBED}/{task.path}", old=task.bad, new=task.good),
        )
        yield Step("Let me rerun the reproduction script.", Action("bash", "python reproduce.py"))
        yield Step(
            f"Now the tests in `{task.test_path}`.", Action("bash", f"python -m pytest {task.test_path} -q")
        )
        yield Step(
            "The tests pass. Let me check some edge cases.", Action("bash", f'python -c "{task.edge}"')
        )
        yield Step("Let me run the whole test directory too.", Action("bash", "python -m pytest tests -q"))
        yield Step("Let me review my change.", Action("bash", "git diff"))
        yield Step(
            "The change is minimal. Let me remove the reproduction script.", Action("bash", "rm reproduce.py")
        )
        yield Step("Everything is in place. Let me submit.", Action("submit"))


# The frameworks --------------------------------------------------------------------------------


def mini_observation(returncode: int, output: str) -> str:
    """`action_observation_template` of mini-swe-agent v1.17.5, rendered as Jinja does: `-}}` and
    `{%- ... -%}` strip the template's own newlines around them, not the output's."""
    if len(output) < MINI_OUTPUT_LIMIT:
        return f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>"
    elided = len(output) - MINI_OUTPUT_LIMIT
    return (
        f"<returncode>{returncode}</returncode>\n{MINI_WARNING}<output_head>\n{output[:5000]}\n</output_head>\n"
        f"<elided_chars>\n{elided} characters elided\n</elided_chars>\n<output_tail>\n{output[-5000:]}\n</output_tail>"
    )


def mini_command(action: Action) -> str:
    if action.kind == "bash":
        return action.command
    if action.kind == "view":
        if action.view_range is None:
            return f"cat {action.path}"
        a, b = action.view_range
        return f"nl -ba {action.path} | sed -n '{a},{b}p'"
    if action.kind == "create":
        return f"cat <<'EOF' > {action.path.removeprefix(TESTBED + '/')}\n{action.text.rstrip()}\nEOF"
    if action.kind == "replace":
        path = action.path.removeprefix(TESTBED + "/")
        return (
            "python - <<'EOF'\nfrom pathlib import Path\n"
            f"p = Path({path!r})\ns = p.read_text()\nold = {action.old!r}\nnew = {action.new!r}\n"
            "assert s.count(old) == 1, s.count(old)\np.write_text(s.replace(old, new))\nprint('patched')\nEOF"
        )
    return SUBMIT


def _numbered(text: str, descriptor: str, first: int = 1) -> str:
    if len(text) > EDITOR_LIMIT:
        text = text[:EDITOR_LIMIT] + EDITOR_CLIPPED
    text = text.expandtabs()
    body = "\n".join(f"{i + first:6}\t{line}" for i, line in enumerate(text.split("\n")))
    return f"Here's the result of running `cat -n` on {descriptor}:\n{body}\n"


def file_map(text: str) -> str:
    """str_replace_editor's abbreviated view: function bodies of 5 or more lines elided."""
    ranges = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start, end = node.body[0].lineno - 1, (node.body[-1].end_lineno or node.body[-1].lineno) - 1
            if end - start >= 5:
                ranges.append((start, end))
    elided = {line for start, end in ranges for line in range(start, end + 1)}
    entries = [(start, f"... eliding lines {start + 1}-{end + 1} ...") for start, end in ranges]
    entries += [(i, line) for i, line in enumerate(text.splitlines()) if i not in elided]
    return "\n".join(f"{i + 1:6d} {line}" for i, line in sorted(entries))


def editor(sandbox: Sandbox, action: Action) -> tuple[int, str]:
    """SWE-agent's `str_replace_editor` (tools/edit_anthropic), as far as these steps use it."""
    host = sandbox.host(action.path)
    path = action.path if action.path.startswith(TESTBED) else f"{TESTBED}/{action.path}"
    if action.kind == "create":
        host.write_text(action.text)
        return 0, f"File created successfully at: {path}\n"
    text = host.read_text()
    if action.kind == "replace":
        text, old, new = text.expandtabs(), action.old.expandtabs(), action.new.expandtabs()
        if text.count(old) != 1:
            return 15, f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}.\n"
        updated = text.replace(old, new)
        host.write_text(updated)
        line = text.split(old)[0].count("\n")
        start = max(1, line - 4)
        end = min(line + 4 + new.count("\n"), len(updated.splitlines()))
        snippet = "\n".join(updated.split("\n")[start - 1 : end])
        message = f"The file {path} has been edited. " + _numbered(snippet, f"a snippet of {path}", start)
        return (
            0,
            message
            + "Review the changes and make sure they are as expected. Edit the file again if necessary.\n",
        )
    if action.view_range:
        lines = text.split("\n")
        first, last = action.view_range
        return 0, _numbered("\n".join(lines[first - 1 : last]), path, first) + "\n"
    if path.endswith(".py") and len(text) > EDITOR_LIMIT:
        shown = file_map(text).expandtabs()
        if len(shown) > EDITOR_LIMIT:
            shown = shown[:EDITOR_LIMIT] + EDITOR_CLIPPED
        return 0, (
            "<NOTE>This file is too large to display entirely. Showing abbreviated version. Please use "
            "`str_replace_editor view` with the `view_range` parameter to show selected lines next.</NOTE>\n"
            f"{shown}\n<IMPORTANT><NOTE>The above file has been abbreviated. Please use `str_replace editor view` "
            "with `view_range` to look at relevant files in detail.</NOTE></IMPORTANT>\n"
        )
    return 0, _numbered(text, path) + "\n"


def _call_id(rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "toolu_01" + "".join(rng.choice(alphabet) for _ in range(22))


def swe_call(action: Action) -> tuple[str, dict[str, Any]]:
    if action.kind == "bash":
        return "bash", {"command": action.command}
    if action.kind == "submit":
        return "submit", {}
    path = action.path if action.path.startswith(TESTBED) else f"{TESTBED}/{action.path}"
    if action.kind == "view":
        arguments: dict[str, Any] = {"command": "view", "path": path}
        if action.view_range:
            arguments["view_range"] = list(action.view_range)
        return "str_replace_editor", arguments
    if action.kind == "create":
        return "str_replace_editor", {"command": "create", "path": path, "file_text": action.text}
    return "str_replace_editor", {
        "command": "str_replace",
        "path": path,
        "old_str": action.old,
        "new_str": action.new,
    }


def generate(framework: str, task: Task, seed: int, chars: int, max_steps: int) -> Trajectory:
    rng = random.Random(f"{framework}:{task.name}:{seed}")
    trajectory = Trajectory(framework, task.name, seed)
    with tempfile.TemporaryDirectory(prefix="trajectory-") as tmp:
        root = Path(tmp) / "testbed"
        root.mkdir()
        build_tree(root, task)
        sandbox = Sandbox(root)
        agent = Agent(task, sandbox, rng, chars, max_steps)
        if framework == "mini-swe-agent":
            _run_mini(trajectory, task, sandbox, agent)
        else:
            _run_swe(trajectory, task, sandbox, agent, rng)
    return trajectory


def _run_mini(trajectory: Trajectory, task: Task, sandbox: Sandbox, agent: Agent) -> None:
    messages = trajectory.messages
    messages.append({"role": "system", "content": tpl.MINI_SYSTEM})
    messages.append({"role": "user", "content": tpl.MINI_INSTANCE.replace("{{task}}", task.issue)})
    trajectory.calls.append(len(messages))
    for step in agent.steps():
        command = mini_command(step.action)
        messages.append(
            {"role": "assistant", "content": f"THOUGHT: {step.thought}\n\n```bash\n{command}\n```"}
        )
        if step.action.kind == "submit":
            return  # the agent stops: the output is the submission, not sent to the model
        returncode, output = sandbox.run(command)
        agent.seen(returncode, output)
        messages.append({"role": "user", "content": mini_observation(returncode, output)})
        trajectory.calls.append(len(messages))


def _run_swe(trajectory: Trajectory, task: Task, sandbox: Sandbox, agent: Agent, rng: random.Random) -> None:
    trajectory.tools = SWE_TOOLS
    messages = trajectory.messages
    messages.append({"role": "system", "content": tpl.SWE_SYSTEM})
    instance = tpl.SWE_INSTANCE.replace("{{working_dir}}", TESTBED).replace(
        "{{problem_statement}}", task.issue
    )
    messages.append({"role": "user", "content": instance})
    trajectory.calls.append(len(messages))
    submitted = False
    for step in agent.steps():
        name, arguments = swe_call(step.action)
        call_id = _call_id(rng)
        call = {
            "function": {"arguments": json.dumps(arguments), "name": name},
            "id": call_id,
            "type": "function",
        }
        messages.append({"role": "assistant", "content": step.thought, "tool_calls": [call]})
        if name == "bash":
            returncode, output = sandbox.run(step.action.command)
        elif name == "submit":
            if submitted:
                return
            submitted = True
            _, diff = sandbox.run("git add -A && git diff --cached")
            returncode, output = 0, tpl.SWE_REVIEW.replace("{{diff}}", diff) + "\n"
        else:
            returncode, output = editor(sandbox, step.action)
            output = sandbox.normalise(output)
        agent.seen(returncode, output)
        if output.strip():
            content = tpl.SWE_NEXT_STEP.replace("{{observation}}", output)
        else:
            content = tpl.SWE_NO_OUTPUT
        messages.append({"role": "tool", "content": content, "tool_call_id": call_id})
        trajectory.calls.append(len(messages))
        if submitted and name == "submit":
            # The review asks to remove the reproduction script (already done) and submit again.
            messages.append(
                {
                    "role": "assistant",
                    "content": "I already removed the reproduction script and changed no test files. Submitting again.",
                    "tool_calls": [
                        {
                            "function": {"arguments": "{}", "name": "submit"},
                            "id": _call_id(rng),
                            "type": "function",
                        }
                    ],
                }
            )
            return


def trajectories(quick: bool = False, seed: int = 0) -> list[Trajectory]:
    """Every task in both frameworks (with `quick`, one task each, shorter), and the Chinese chat
    where its manual pages are installed."""
    if quick:
        plan = [("mini-swe-agent", TASKS[0], 150_000, 60), ("swe-agent", TASKS[1], 150_000, 60)]
    else:
        rng = random.Random(seed)
        plan = [
            (framework, task, rng.randint(550_000, 800_000), rng.randint(125, 150))
            for task in TASKS
            for framework in FRAMEWORKS
        ]
    out = [generate(framework, task, seed, chars, steps) for framework, task, chars, steps in plan]
    chat = chinese_chat(seed, documents=3 if quick else None)
    return [*out, chat] if chat else out


def cache_path(quick: bool, seed: int) -> Path:
    """Where a run's trajectories are kept: keyed by everything they are made of (this module and
    its data, the Starlette and Python versions, the manual pages), so a change makes new ones."""
    import hashlib

    import starlette

    digest = hashlib.sha256()
    for module in ("trajectories.py", "trajectory_tasks.py", "trajectory_templates.py"):
        digest.update((HERE / module).read_bytes())
    digest.update(f"{starlette.__version__}|{sys.version}|{quick}|{seed}".encode())
    for directory in MAN_DIRS:
        if Path(directory).is_dir():
            for page in sorted(Path(directory).rglob("*.gz")):
                digest.update(f"{page.name}:{page.stat().st_size}".encode())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "compacting-proxy"
    return base / f"trajectories-{digest.hexdigest()[:16]}.json"


def cached_trajectories(quick: bool = False, seed: int = 0, *, refresh: bool = False) -> list[Trajectory]:
    """`trajectories()`, made once and kept (generating runs hundreds of real commands)."""
    from dataclasses import asdict

    path = cache_path(quick, seed)
    if not refresh and path.exists():
        return [Trajectory(**item) for item in json.loads(path.read_text())]
    made = trajectories(quick, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps([asdict(t) for t in made], ensure_ascii=False))
    partial.replace(path)
    return made


if __name__ == "__main__":
    for t in trajectories(quick="--quick" in sys.argv):
        chars = sum(len(json.dumps(m)) for m in t.messages)
        print(f"{t.name}: {len(t.messages)} messages, {len(t.calls)} model calls, {chars:,} chars")


# A Chinese conversation -------------------------------------------------------------------------

MAN_DIRS = ("/usr/share/man/zh_CN",)  # Debian's passwd, login and man-db ship these translations
ZH_SYSTEM = "你是一名 Linux 系统管理助手。用户会贴出中文手册页，请只根据文档内容回答，并尽量引用原文。"
_TROFF_ESCAPES = (
    (re.compile(r"\\f[BIRP]|\\f\(\w\w|\\&|\\\*\(\w\w|\\\*\w|\\m\[\]|\\c|\\\||\\/"), ""),
    (re.compile(r"\\-"), "-"),
    (re.compile(r"\\\(em"), "—"),
    (re.compile(r"\\\(aq"), "'"),
    (re.compile(r"\\\(dq"), '"'),
    (re.compile(r"\\\(bu"), "•"),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\ "), " "),
    (re.compile(r"\\\(\w\w"), ""),
)


def man_text(troff: str) -> list[tuple[str, str]]:
    """A manual page's sections as (title, plain text), the troff requests and escapes removed."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in troff.splitlines():
        if line.startswith(("'\\\"", '.\\"')):
            continue
        if line.startswith((".SH", ".SS")):
            sections.append((line[3:].strip().strip('"'), []))
            continue
        if line.startswith("."):
            request, _, rest = line.partition(" ")
            if request in (".B", ".I", ".BR", ".IR", ".BI", ".RB"):
                line = rest.replace('"', "")
            elif request in (".PP", ".TP", ".IP", ".sp", ".br", ".RS", ".RE"):
                line = ""
            else:
                continue
        for pattern, replacement in _TROFF_ESCAPES:
            line = pattern.sub(replacement, line)
        sections[-1][1].append(line)
    out = []
    for title, lines in sections:
        text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        if title and text:
            out.append((title, text))
    return out


def _cjk_share(text: str) -> float:
    return sum("\u4e00" <= c <= "\u9fff" for c in text) / max(1, len(text))


def chinese_chat(seed: int = 0, documents: int | None = None) -> Trajectory | None:
    """A user pastes Chinese manual pages one after another and asks about each; the assistant
    answers with the page's own sentences. None where no Chinese manual pages are installed."""
    import gzip

    pages = sorted(
        path for directory in MAN_DIRS if Path(directory).is_dir() for path in Path(directory).rglob("*.gz")
    )
    rng = random.Random(f"chat-zh:{seed}")
    trajectory = Trajectory("chat-zh", "man-pages", seed)
    messages = trajectory.messages
    messages.append({"role": "system", "content": ZH_SYSTEM})
    used = 0
    for path in pages:
        sections = man_text(gzip.decompress(path.read_bytes()).decode("utf-8", "replace"))
        document = "\n\n".join(f"{title}\n{text}" for title, text in sections)
        if _cjk_share(document) < 0.15 or len(sections) < 3:
            continue
        name = path.name.removesuffix(".gz")
        messages.append(
            {
                "role": "user",
                "content": f"下面是 {name} 的中文手册页，请先读一遍：\n\n{document}\n\n请概括它的用途。",
            }
        )
        trajectory.calls.append(len(messages))
        messages.append({"role": "assistant", "content": f"根据手册页：{sections[0][1][:300]}"})
        for title, text in rng.sample(sections[1:], min(3, len(sections) - 1)):
            messages.append({"role": "user", "content": f"「{title}」一节说了什么？请摘录要点。"})
            trajectory.calls.append(len(messages))
            messages.append({"role": "assistant", "content": f"「{title}」一节写道：{text[:400]}"})
        used += 1
        if documents is not None and used >= documents:
            break
    if not used:
        return None
    messages.pop()  # the conversation ends at its last request
    return trajectory

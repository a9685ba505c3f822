"""Where a module of `proxy/` goes: each folder's role, read from what its modules import and
define (`tests/project/test_layout.py` checks every module, as `tiers.py` places the test files).
Each rule's message says where the file, or the code, goes instead. DESIGN's picture, folder by
folder:

- connections/, the HTTP layer under the app: only the commands import it, and uvicorn's own
  modules are imported there and by the commands only;
- bodies/, large bodies off the event loop: the one folder with child processes, whose parser is
  reached through `bodies/work.py` (where a body's size is asked);
- ways/, the seam and every way: a class with the seam's verbs implements all of `Way`, each bridge
  package registers a `Bridge` in its `choice.py`, wired in `server/parts.py`, the only module
  outside ways/ that names a bridge;
- formats/, one module per wire format: each format is on a route row, and none does I/O;
- live/, the page apart from the core: it imports nothing of the request path, and only server/
  imports it;
- server/, the request's steps: no way or bridge is defined there, and no module outside formats/
  and the bridges compares a format's name (it asks the format object) or asks a seam's member
  by name (`getattr(wire, "context_report")`).

And every module small (`oversized`): at most 300 lines, a module to a job, and no function over 60,
each reading as its steps (issue 39's sizes).

The engine and counting are pure: `tests/project/test_layers.py`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

from proxy.formats import ROUTES
from proxy.formats.base import WireFormat
from proxy.ways.base import Way
from proxy.ways.choice import Bridge
from tests.support.modules import BODIES, PROXY, module_name, where

COMMANDS = ("proxy.cli", "proxy.stub", "proxy.demo", "proxy.run", "proxy.__main__")
HTTP_LAYER = {"uvicorn", "httptools", "h11", "websockets"}
CHILDREN = {"multiprocessing", "concurrent"}
NOT_IO = {"httpx", "aiohttp", "asyncio", "redis", "socket", "uvicorn"}
REQUEST_PATH = ("server", "ways", "bodies", "connections")
BRIDGES = tuple(sorted(p.parent.name for p in (PROXY / "ways").glob("*/__init__.py")))
FORMAT_NAMES = {route.format.name for route in ROUTES}
SEAM_HOLDERS = ("wire", "format", "way", "bridge")  # what the core calls a format, a way, a bridge
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60


def folder(module: str) -> str:
    """The folder of `proxy/` a module is in (`ways` for `proxy.ways.ollama.bridge`), or its name."""
    return module.split(".")[1] if module.count(".") else module


def is_command(module: str) -> bool:
    return module.startswith(COMMANDS)


def misplaced_import(module: str, imported: str) -> str | None:
    """Why `module` may not import `imported`, by the role of its folder or of the imported one."""
    mine, top = folder(module), imported.split(".")[0]
    its = folder(imported) if top == "proxy" else None
    says = f"{module} imports {imported}"
    if (its == "connections" or top in HTTP_LAYER) and mine != "connections" and not is_command(module):
        return f"{says}: the HTTP layer under the app goes in connections/, installed by the command (cli.py)"
    if top in CHILDREN and mine != "bodies":
        return f"{says}: work in a child process is a large body's: it goes in bodies/"
    if imported == "proxy.bodies.split_parse" and mine != "bodies":
        return f"{says}: a large body is parsed through proxy.bodies.work.Bodies, which asks its size"
    if mine == "formats" and top in NOT_IO:
        return (
            f"{says}: a wire format reads and writes bodies; what sends or waits goes in ways/ or upstream/"
        )
    if mine == "live" and its in REQUEST_PATH:
        return f"{says}: the live page reads the records the pipeline appends (live/entries.py), never the request path's objects"
    if its == "live" and mine not in ("live", "server"):
        return f"{says}: only the request's steps (server/) append to the live page"
    bridge = imported.split(".")[2] if its == "ways" and imported.count(".") > 1 else None
    if bridge in BRIDGES and mine != "ways" and module != "proxy.server.parts":
        return f"{says}: a bridge is registered for the formats it carries and wired in server/parts.py alone; the steps go over `Way`"
    return None


def members(cls: type) -> set[str]:
    """What a class declares: its attributes, methods and annotated fields (a Protocol's members)."""
    return {n for n in (*vars(cls), *getattr(cls, "__annotations__", {})) if not n.startswith("_")}


def seam_named(node: ast.AST, seams: set[str]) -> str | None:
    """A format's name compared (`route.format.name == "responses"`, `route.bridge == "ollama"`), or
    a seam's member asked by name (`getattr(wire, "context_report", None)`), in `node`."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        texts = {c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant)}
        reads = [s for s in sides if isinstance(s, ast.Attribute)]
        if texts & FORMAT_NAMES and any(s.attr in ("name", "bridge", "label") for s in reads):
            return f"compares {ast.unparse(node)}: ask the format object, or register by it"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
    ):
        asked = node.args[1] if len(node.args) > 1 else None
        of = ast.unparse(node.args[0]) if node.args else ""
        if isinstance(asked, ast.Constant) and asked.value in seams and any(w in of for w in SEAM_HOLDERS):
            return f"asks {ast.unparse(node)}: a seam's member is called, every implementation has it"
    return None


def names_seams(path: Path, source: str) -> list[str]:
    """Where a module outside formats/ and the bridges names a format or asks a seam by name."""
    name = module_name(path)
    if folder(name) == "formats" or any(name.startswith(f"proxy.ways.{b}") for b in BRIDGES):
        return []
    seams = members(WireFormat) | members(Way) | members(Bridge)
    found = ((n, seam_named(n, seams)) for n in ast.walk(ast.parse(source)))
    return [f"{where(path)}:{n.lineno} {why}" for n, why in found if why]


def classes_in(under: str) -> list[tuple[str, type]]:
    """Every class a module under `proxy/<under>` defines (the modules imported), with the module's
    name; the seams themselves (protocols) left out."""
    found = []
    for path in sorted((PROXY / under).rglob("*.py")):
        module = importlib.import_module(module_name(path))
        found += [(module.__name__, c) for c in vars(module).values() if inspect.isclass(c)]
    return [(m, c) for m, c in found if c.__module__ == m and not getattr(c, "_is_protocol", False)]


def declared(cls: type) -> set[str]:
    """What an instance of `cls` has: its attributes and methods, and its dataclass fields."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return set(dir(cls)) | fields


def missing_seam(module: str, cls: type) -> str | None:
    """Why a class of ways/ with the seam's verbs is not a whole way."""
    has, seam = declared(cls), members(Way)
    if {"relay", "content"} & has and not seam <= has:
        return f"{module}.{cls.__name__} lacks {sorted(seam - has)} of `Way` (proxy/ways/base.py)"
    return None


def unregistered(bridge: str, wiring: str) -> str | None:
    """Why the bridge package `ways/<bridge>/` is not registered and wired."""
    registered = [c for m, c in classes_in(f"ways/{bridge}") if members(Bridge) <= declared(c)]
    if not registered or any(c.__module__ != f"proxy.ways.{bridge}.choice" for c in registered):
        return f"ways/{bridge}/: a bridge registers itself, a `Bridge` (formats, way), in ways/{bridge}/choice.py"
    unwired = [
        c.__name__ for c in registered if f"from proxy.ways.{bridge}.choice import {c.__name__}" not in wiring
    ]
    return f"ways/{bridge}/choice.py: wire {unwired} in server/parts.py (`Bridges`)" if unwired else None


def unrouted(module: str, cls: type) -> str | None:
    """Why a wire format of formats/ is not routed."""
    if not members(WireFormat) - {"name", "reply_field"} <= declared(cls):
        return None  # not a wire format
    if any(type(route.format) is cls for route in ROUTES):
        return None
    return f"{module}.{cls.__name__} is a wire format on no route row: add its FormatRoute to proxy/formats/routes.py"


Function = ast.FunctionDef | ast.AsyncFunctionDef


def oversized(path: Path, source: str) -> list[str]:
    """Where a module of `proxy/` is larger than the house's sizes: over `MAX_MODULE_LINES` lines, or
    with a function or method over `MAX_FUNCTION_LINES` (from its `def`, or its first decorator, to
    its last line), each named by its file, line and qualified name."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(
            f"{where(path)} is {lines} lines (at most {MAX_MODULE_LINES}): split it along a seam, "
            "one job a module"
        )
    for name, node in functions(ast.parse(source)):
        length = node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1
        if length > MAX_FUNCTION_LINES:
            found.append(
                f"{where(path)}:{node.lineno} {name} is {length} lines (at most {MAX_FUNCTION_LINES}): "
                "let it read as its steps, the helpers beside it"
            )
    return found


def functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method in `node`'s statements, nested ones too, with its qualified name
    (`Metrics.__init__`, `Records._draw_well.<locals>.drawn`)."""
    for field in BODIES:
        for child in getattr(node, field, ()):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + child.name, child
                yield from functions(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from functions(child, f"{prefix}{child.name}.")
            else:
                yield from functions(child, prefix)

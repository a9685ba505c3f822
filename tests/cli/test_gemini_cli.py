"""The real Gemini CLI (`@google/gemini-cli`, from npm) in a tool loop on a real source tree: against a
scripted Gemini API server that enforces its window (tests/support/upstreams/gemini_model.py), directly
(the control: it goes over the window and the CLI exits on the 400) and through the real
`compacting-proxy` process at 32k; a short run through the proxy's Gemini bridge to a real
llama-server with the tiny model (its Chat Completions), which no server offers by itself; and a
loop past the CLI's loop check through the bridge to a strict Chat Completions server.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support import gemini_cli
from tests.support.agent_clis import RUN_MODEL, lay_out_tree, model_server
from tests.support.processes import free_port
from tests.support.upstreams.agent_model import DONE_MARK
from tests.support.upstreams.llama import LlamaServer, _start, write_model
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = [
    pytest.mark.cli,
    pytest.mark.timeout(600),
    gemini_cli.NEEDS_GEMINI_CLI,
]
STEPS = 30


def test_gemini_cli_finishes_a_long_loop_through_the_proxy_at_32k() -> None:
    r = gemini_cli.run(32_000, proxied=True, steps=STEPS)
    tools = [x for x in r.received if x.get("kind") in ("tools", "final")]
    assert r.over == 0, r.explain()
    assert r.finished, r.explain()
    assert r.orphans == 0, r.explain()
    assert max(x["tokens"] for x in r.received) > 16_000, "the loop grew: the proxy had to compact"
    assert len({x["fixed"] for x in r.received if x["tools"]}) == 1, "system instruction and tools as sent"
    assert all(x["has_task"] for x in tools), r.explain()
    # The newest turns' thought signatures came through: the script resumes from them.
    assert [x["step"] for x in tools] == list(range(1, STEPS + 2)), r.explain()


def test_without_the_proxy_the_server_window_stops_gemini_cli() -> None:
    r = gemini_cli.run(32_000, proxied=False, steps=STEPS)
    assert r.over > 0 and not r.finished, r.explain()


@contextmanager
def llama_with_room(ctx: int) -> Iterator[LlamaServer]:
    """The tiny model (its trained context is 32k), replies kept short (`-n`: the random model would
    otherwise write until the window is full)."""
    from tests.support.processes import stop

    with tempfile.TemporaryDirectory(prefix="llama-gemini-") as tmp:
        server = _start(
            gemini_cli_binary(), write_model(Path(tmp)), Path(tmp), ctx=ctx, slots=1, extra=["-n", "48"]
        )
        try:
            yield server
        finally:
            stop(server.process)


def gemini_cli_binary() -> Path:
    from scripts import llama_server as llama_build

    return llama_build.binary_path()


@pytest.mark.llama
def test_gemini_cli_runs_on_llama_server_through_the_bridge() -> None:
    with tempfile.TemporaryDirectory(prefix="agent-gemini-llama-") as tmp:
        tree = lay_out_tree(Path(tmp))
        with (
            llama_with_room(32_768) as llama,
            running_proxy(f"{llama.base_url}/v1", "auto", tokenizer="upstream") as proxy,
        ):
            home = Path(tmp) / "home"
            code, output = gemini_cli.run_cli(proxy.base_url, "tiny", tree, home, timeout=300, small=True)
            log = proxy.log_tail(60)
            served = llama.log_tail(200)
    assert code == 0, f"{output[-2000:]}\n--- proxy ---\n{log}"
    assert re.search(r'"POST /v1beta/models/tiny:streamGenerateContent\?alt=sse HTTP/1.1" 200', log), log
    assert "processing task" in served, served[-2000:]  # the model ran the translated chat


def test_the_loop_check_and_side_calls_pass_the_bridge_to_a_strict_server() -> None:
    """Gemini CLI pointed at the proxy by hand, the proxy bridging to a strict Chat Completions
    server (the scripted agent model behind `tests.support.upstreams.strict`) with
    `COMPACT_GEMINI_MODEL`: from its 30th turn the CLI's loop check sends its history ending in a
    call not answered yet, which the server would refuse as OpenAI's API does; and names
    `gemini-3-flash-preview`, which the server does not have."""
    steps = 34
    with tempfile.TemporaryDirectory(prefix="agent-gemini-strict-") as tmp:
        tree = lay_out_tree(Path(tmp))
        with (
            model_server(64_000, steps, tree, free_port(), None, strict=True) as server,
            running_proxy(f"{server}/v1", 64_000, gemini_model=RUN_MODEL) as proxy,
        ):
            code, output = gemini_cli.run_cli(
                proxy.base_url, RUN_MODEL, tree, Path(tmp) / "home", timeout=600
            )
            recorded = httpx.get(f"{server}/_recorded", timeout=30).json()
    explain = f"exit {code}\n{output[-2000:]}"
    assert code == 0 and DONE_MARK in output, explain
    assert recorded["refused"] == [], explain
    assert [r for r in recorded["received"] if r["kind"] == "json"], "the loop check reached the server"
    assert {r["model"] for r in recorded["received"]} == {RUN_MODEL}

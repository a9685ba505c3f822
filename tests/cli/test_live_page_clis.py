"""The live page knows each real agent CLI's session by the header it sends (the pinned CLIs of
`tests/clis`, through the real proxy to the scripted agent model): one conversation per run, named
by its own session header, in its own wire format."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.support.agent_clis import (
    CLIENTS,
    NEEDS_THE_CLIS,
    client_command,
    lay_out_tree,
    model_server,
)
from tests.support.processes import free_port
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = [pytest.mark.cli, NEEDS_THE_CLIS]

WINDOW = 32000
SESSION = {
    "claude": ("x-claude-code-session-id", "messages"),
    "codex": ("session-id", "responses"),
    "opencode": ("x-session-affinity", "chat"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("client", CLIENTS)
def test_each_cli_session_is_one_conversation_named_by_its_header(client: str) -> None:
    with tempfile.TemporaryDirectory(prefix=f"live-{client}-") as tmp:
        tree = lay_out_tree(Path(tmp))
        home = Path(tmp) / "home"
        home.mkdir()
        port = free_port()
        with (
            running_proxy(f"http://127.0.0.1:{port}/v1", WINDOW) as proxy,
            model_server(WINDOW, 3, tree, port, proxy.base_url) as base,
        ):
            cmd, env = client_command(client, f"{base}/tap", WINDOW, home, False)
            done = subprocess.run(
                cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL
            )
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            conversations = httpx.get(proxy.base_url + "/ui/conversations").json()["conversations"]
    (conversation,) = conversations
    assert (conversation["source"], conversation["format"]) == SESSION[client]
    assert conversation["requests"] >= 3

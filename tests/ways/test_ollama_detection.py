"""Which window an Ollama model gets when nothing is configured: what the upstream is asked."""

from __future__ import annotations

import httpx

from proxy.settings import Settings
from proxy.upstream.probes import MAX_ASKED_NAME_CHARS
from proxy.ways.ollama.detection import OllamaUpstream


async def test_a_name_no_ollama_could_have_is_not_sent_to_api_show() -> None:
    asked: list[tuple[str, int]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append((request.url.path, len(request.content)))
        return httpx.Response(200, json={"model_info": {"llama.context_length": 131072}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    ollama = OllamaUpstream(client, Settings(upstream_url="http://ollama.test", upstream_kind="ollama"))
    short, long = "llama3.1:8b", "m" * (4 * MAX_ASKED_NAME_CHARS)
    assert await ollama.num_ctx(short) == 32768  # trained for 131,072, capped at the default maximum
    assert await ollama.num_ctx(long) == await ollama.num_ctx(long)
    assert [path for path, _ in asked] == ["/api/show"], "only the real name was asked about"
    assert max(size for _, size in asked) < 1024

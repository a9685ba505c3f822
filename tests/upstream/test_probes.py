"""Window detection against responses shaped like each server kind's (recorded from their APIs)."""

from __future__ import annotations

import gc
import types
from typing import Any

import httpx
import pytest

from proxy.upstream.probes import (
    MAX_ASKED_NAME_CHARS,
    UpstreamTokenCounter,
    WindowDetector,
    fetch,
    window_from_llama_props,
    window_from_models,
    window_from_ollama_ps,
    window_from_ollama_show,
)

VLLM_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "Qwen/Qwen2.5-7B-Instruct",
            "object": "model",
            "created": 1733000000,
            "owned_by": "vllm",
            "root": "Qwen/Qwen2.5-7B-Instruct",
            "parent": None,
            "max_model_len": 32768,
            "permission": [{"id": "modelperm-1", "object": "model_permission", "allow_sampling": True}],
        }
    ],
}
LLAMA_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "tiny.gguf",
            "object": "model",
            "created": 1733000000,
            "owned_by": "llamacpp",
            "meta": {"vocab_type": 2, "n_vocab": 512, "n_ctx_train": 4096, "n_embd": 64, "n_params": 100000},
        }
    ],
}
LLAMA_PROPS = {
    "default_generation_settings": {
        "id": 0,
        "id_task": -1,
        "n_ctx": 1024,
        "speculative": False,
        "params": {},
    },
    "total_slots": 2,
    "model_path": "tiny.gguf",
    "chat_template": "{{ messages }}",
    "build_info": "b6000-abc",
}
OLLAMA_OPENAI_MODELS = {
    "object": "list",
    "data": [{"id": "llama3.1:8b", "object": "model", "owned_by": "library"}],
}
OLLAMA_PS = {
    "models": [
        {
            "name": "llama3.1:8b",
            "model": "llama3.1:8b",
            "size": 6654289920,
            "digest": "46e0c10c039e",
            "details": {"format": "gguf", "family": "llama", "parameter_size": "8.0B"},
            "expires_at": "2026-12-02T16:00:00Z",
            "size_vram": 0,
            "context_length": 4096,
        }
    ]
}
OLLAMA_SHOW = {
    "modelfile": "FROM llama3.1",
    "parameters": 'num_ctx                        16384\nstop                           "<|eot_id|>"',
    "template": "{{ .Prompt }}",
    "details": {"family": "llama"},
    "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
}
OLLAMA_SHOW_DEFAULTS = {"parameters": 'stop "<|eot_id|>"', "model_info": {"llama.context_length": 131072}}
OPENROUTER_MODELS = {"data": [{"id": "a", "context_length": 200000}, {"id": "b", "context_length": 8000}]}
LMSTUDIO_MODELS = {"data": [{"id": "qwen", "max_context_length": 32768, "loaded_context_length": 8192}]}


def test_parsers() -> None:
    assert window_from_models(VLLM_MODELS, "Qwen/Qwen2.5-7B-Instruct").tokens == 32768  # type: ignore[union-attr]
    assert window_from_models(LLAMA_MODELS, "anything") is None, "n_ctx_train is not the window in effect"
    assert window_from_models(OPENROUTER_MODELS, "b").tokens == 8000  # type: ignore[union-attr]
    assert window_from_models(OPENROUTER_MODELS, "c") is None
    assert window_from_models(LMSTUDIO_MODELS, "qwen").tokens == 8192  # type: ignore[union-attr]
    assert window_from_llama_props(LLAMA_PROPS).tokens == 1024  # type: ignore[union-attr]
    assert window_from_ollama_ps(OLLAMA_PS, "llama3.1:8b").tokens == 4096  # type: ignore[union-attr]
    assert window_from_ollama_ps(OLLAMA_PS, "other") is None
    show = window_from_ollama_show(OLLAMA_SHOW)
    assert show and show.tokens == 16384 and "num_ctx" in show.source
    default = window_from_ollama_show(OLLAMA_SHOW_DEFAULTS)  # trained for 131072, runs at Ollama's default
    assert default and default.tokens == 4096 and "default context" in default.source
    for garbage in (
        None,
        [],
        "x",
        {"data": "x"},
        {"models": [1]},
        {"default_generation_settings": {"n_ctx": -1}},
    ):
        assert window_from_models(garbage, "m") is None
        assert window_from_llama_props(garbage) is None
        assert window_from_ollama_ps(garbage, "m") is None
        assert window_from_ollama_show(garbage) is None


def server(routes: dict[tuple[str, str], Any], seen: list[str]) -> httpx.AsyncClient:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        answer = routes.get((request.method, request.url.path))
        return httpx.Response(200, json=answer) if answer is not None else httpx.Response(404, json={})

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


@pytest.mark.parametrize(
    ("routes", "model", "tokens"),
    [
        ({("GET", "/v1/models"): VLLM_MODELS}, "Qwen/Qwen2.5-7B-Instruct", 32768),
        ({("GET", "/v1/models"): LLAMA_MODELS, ("GET", "/props"): LLAMA_PROPS}, "tiny", 1024),
        ({("GET", "/v1/models"): OLLAMA_OPENAI_MODELS, ("GET", "/api/ps"): OLLAMA_PS}, "llama3.1:8b", 4096),
        (
            {
                ("GET", "/v1/models"): OLLAMA_OPENAI_MODELS,
                ("GET", "/api/ps"): {"models": []},
                ("POST", "/api/show"): OLLAMA_SHOW,
            },
            "llama3.1:8b",
            16384,
        ),
    ],
)
async def test_detector_finds_each_server_kind(
    routes: dict[tuple[str, str], Any], model: str, tokens: int
) -> None:
    seen: list[str] = []
    detector = WindowDetector(server(routes, seen), "http://up.test/v1")
    found = await detector.window(model)
    assert found and found.tokens == tokens


async def test_detector_caches_and_refreshes() -> None:
    seen: list[str] = []
    now = [0.0]
    detector = WindowDetector(
        server({("GET", "/v1/models"): VLLM_MODELS}, seen),
        "http://up.test/v1",
        refresh=60,
        clock=lambda: now[0],
    )
    model = "Qwen/Qwen2.5-7B-Instruct"
    await detector.window(model)
    await detector.window(model)
    assert seen == ["GET /v1/models"]
    now[0] = 61
    await detector.window(model)
    assert seen == ["GET /v1/models"] * 2


async def test_detector_failure_is_none_and_cached() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    detector = WindowDetector(httpx.AsyncClient(transport=httpx.MockTransport(refuse)), "http://up.test/v1")
    assert await detector.window("m") is None
    assert await detector.window("m") is None


async def test_a_name_no_server_could_have_is_not_sent_in_a_probe() -> None:
    listed, unlisted = "a" * MAX_ASKED_NAME_CHARS * 4, "b" * MAX_ASKED_NAME_CHARS * 4
    models = {"data": [{"id": listed, "max_model_len": 4096}, {"id": "other", "max_model_len": 8192}]}
    seen: list[str] = []
    detector = WindowDetector(server({("GET", "/v1/models"): models}, seen), "http://up.test/v1")
    found = await detector.window(listed)
    assert found and found.tokens == 4096, "a list asked without the name is still read"
    assert await detector.window(unlisted) is None
    assert not any("/api/show" in s or "/v1beta/" in s for s in seen), seen
    asked: list[str] = []
    detector = WindowDetector(server({("POST", "/api/show"): OLLAMA_SHOW}, asked), "http://up.test/v1")
    assert await detector.window("c" * MAX_ASKED_NAME_CHARS)
    assert "POST /api/show" in asked, "up to the bound, names are asked about"


async def test_a_probes_body_is_freed_with_its_answer() -> None:
    # httpx binds a response to its stream (a cycle): collected late, it held each probe's body.
    content = b"x" * 1_000_000
    client = server({("POST", "/api/show"): OLLAMA_SHOW}, [])
    gc.disable()
    try:
        answer = await fetch(client, "POST", "http://up.test/api/show", [], content)
        holders = [r for r in gc.get_referrers(content) if not isinstance(r, types.FrameType)]
    finally:
        gc.enable()
    assert answer and answer[0] == 200
    assert holders == []


async def test_exact_counts_from_vllm_and_llama_cpp() -> None:
    vllm = server({("POST", "/tokenize"): {"count": 321, "max_model_len": 32768, "tokens": [1] * 321}}, [])
    assert await UpstreamTokenCounter(vllm, "http://up.test/v1").count({"messages": []}) == 321
    seen: list[str] = []
    llama = server(
        {
            ("POST", "/tokenize"): {"tokens": [1, 2, 3]},
            ("POST", "/apply-template"): {"prompt": "<|im_start|>"},
        },
        seen,
    )
    assert await UpstreamTokenCounter(llama, "http://up.test/v1").count({"messages": []}) == 3
    assert seen == ["POST /tokenize", "POST /apply-template", "POST /tokenize"]


async def test_auto_window_decides_through_the_app() -> None:
    from tests.support.conversations import bike_shop_chat
    from tests.support.fakes import RecordingUpstream, completion, proxy_client

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(
                200,
                json={
                    "data": [{"id": "big", "max_model_len": 131072}, {"id": "small", "max_model_len": 4096}]
                },
            )
        return httpx.Response(200, json=completion())

    upstream = RecordingUpstream(respond=respond)
    body = {"model": "big", "messages": bike_shop_chat()}
    async with proxy_client(upstream, window="auto", fallback_window=2048) as client:
        big = await client.post("/v1/chat/completions", json=body)
        small = await client.post("/v1/chat/completions", json={**body, "model": "small"})
        report = (await client.post("/compact", json={**body, "model": "small"})).json()["report"]
    assert "x-compaction-tokens-before" not in big.headers
    assert "x-compaction-tokens-before" in small.headers
    assert report["window"] == 4096
    paths = [r.url.path for r in upstream.requests]
    assert paths.count("/v1/models") == 2, "asked once per model, then cached"


async def test_a_configured_window_wins_over_detection() -> None:
    from tests.support.fakes import RecordingUpstream, proxy_client

    upstream = RecordingUpstream()
    async with proxy_client(upstream, window="auto", model_windows="m=1000") as client:
        report = (await client.post("/compact", json={"model": "m", "messages": []})).json()["report"]
        fallback = (await client.post("/compact", json={"model": "x", "messages": []})).json()["report"]
    assert report["window"] == 1000
    assert fallback["window"] == 8192, "nothing detected: the fallback"
    assert [r.url.path for r in upstream.requests].count("/v1/models") == 1

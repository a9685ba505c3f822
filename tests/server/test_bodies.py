"""Bodies an upstream would accept reach it: compressed bodies, odd but legal messages, images."""

from __future__ import annotations

import base64
import gzip
import json
import struct
import zlib
from typing import Any

import httpx
import pytest

from proxy.counting.images import anthropic_tokens, image_size, image_tokens, openai_tokens
from proxy.engine.notes import NOTE_PREFIX
from tests.support.conversations import bike_shop_chat
from tests.support.fakes import RecordingUpstream, proxy_client
from tests.support.upstreams.faulty import serve_in_thread
from tests.support.upstreams.proxy_server import running_proxy


def long_body() -> dict[str, Any]:
    return {"model": "m", "messages": bike_shop_chat(), "x_vendor": {"keep": True}}


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some clients send it
    ],
)
async def test_a_compressed_chat_is_decoded_compacted_and_forwarded(encoding: str, compress: Any) -> None:
    upstream = RecordingUpstream()
    body = long_body()
    async with proxy_client(upstream, window=8000, keep_recent_tool_results=1) as client:
        response = await client.post(
            "/v1/chat/completions",
            content=compress(json.dumps(body).encode()),
            headers={"content-type": "application/json", "content-encoding": encoding},
        )
    assert response.status_code == 200, response.text
    assert "content-encoding" not in upstream.last.headers, "the body is forwarded decoded"
    sent = upstream.last_json()
    assert sent["x_vendor"] == {"keep": True}
    assert sent["messages"][3]["content"].startswith(NOTE_PREFIX)


@pytest.mark.parametrize(
    ("encoding", "content", "status", "code"),
    [
        ("br", b"\x1b\x00", 415, "unsupported_content_encoding"),
        ("gzip", b"not gzip at all", 400, "invalid_content_encoding"),
        # mtime=0: the header's time is part of the test's id, which must not change from run to run
        ("gzip", gzip.compress(b'{"model": "m"', mtime=0)[:-6], 400, "invalid_content_encoding"),
        ("gzip", gzip.compress(b" " * 5_000_000, mtime=0), 413, "request_too_large"),  # a small bomb
    ],
)
async def test_a_body_that_cannot_be_decoded_gets_a_clear_error(
    encoding: str, content: bytes, status: int, code: str
) -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream, max_body_bytes=1_000_000) as client:
        response = await client.post(
            "/v1/chat/completions", content=content, headers={"content-encoding": encoding}
        )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert encoding in response.json()["error"]["message"] or status == 413
    assert not upstream.requests


@pytest.mark.process
def test_a_gzipped_long_chat_through_the_real_process() -> None:
    body = long_body()
    with (
        serve_in_thread() as upstream,
        running_proxy(upstream.url, 8000, tokenizer="chars4", keep_recent_tool_results="1") as proxy,
    ):
        response = httpx.post(
            f"{proxy.base_url}/v1/chat/completions",
            content=gzip.compress(json.dumps(body).encode()),
            headers={"content-type": "application/json", "content-encoding": "gzip"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-compaction-truncated"] == "1"
        [received] = [
            r for c in upstream.connections for r in c.requests if r.target.endswith("/chat/completions")
        ]
    assert "content-encoding" not in received.headers
    sent = json.loads(received.body)
    assert sent["x_vendor"] == {"keep": True} and len(sent["messages"]) == len(body["messages"])
    assert sent["messages"][3]["content"].startswith(NOTE_PREFIX)


@pytest.mark.parametrize("role", ["user", "system"])
async def test_a_message_with_odd_tool_calls_is_forwarded_not_refused(role: str) -> None:
    upstream = RecordingUpstream()
    raw = json.dumps(
        {"model": "m", "messages": [{"role": role, "content": "hi", "tool_calls": "not-an-array"}]}
    ).encode()
    async with proxy_client(upstream) as client:
        response = await client.post(
            "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200
    assert upstream.last.content == raw


def png(width: int, height: int) -> bytes:
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + b"IHDR"
        + struct.pack(">II", width, height)
        + b"\x08\x02\x00\x00\x00"
    )


def jpeg(width: int, height: int) -> bytes:
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 3000) + b"E" * 3000  # an APP1 block before the frame
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + exif + sof + b"\xff\xd9"


def data_url(image: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(image).decode()


@pytest.mark.parametrize(
    ("image", "size"),
    [
        (png(1024, 768), (1024, 768)),
        (jpeg(4032, 3024), (4032, 3024)),
        (b"GIF89a" + struct.pack("<HH", 31, 17) + b"\x00" * 8, (31, 17)),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8X"
            + b"\x00" * 8
            + (639).to_bytes(3, "little")
            + (479).to_bytes(3, "little"),
            (640, 480),
        ),
    ],
)
def test_an_inline_image_s_size_is_read_from_its_header(image: bytes, size: tuple[int, int]) -> None:
    assert image_size(data_url(image)) == size
    assert image_size(base64.b64encode(image).decode()) == size  # Ollama's bare base64


def test_image_costs_follow_the_providers_documented_examples() -> None:
    # OpenAI's vision guide: 1024x1024 high is 765; 2048x4096 is 1105; low detail is always 85.
    assert openai_tokens(1024, 1024) == 765
    assert openai_tokens(2048, 4096) == 1105
    assert (
        image_tokens(
            {"type": "image_url", "image_url": {"url": data_url(png(4000, 4000)), "detail": "low"}}, 768
        )
        == 85
    )
    # Anthropic's vision guide: about 1,590 tokens for 1092x1092 (width x height / 750).
    assert anthropic_tokens(1092, 1092) == 1590
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    assert image_tokens(remote, 768) == 768, "an unreadable size costs the configured default"


async def test_a_tiny_request_with_small_images_is_not_over_the_line() -> None:
    upstream = RecordingUpstream()
    parts: list[dict[str, Any]] = [{"type": "text", "text": "What is in these pictures?"}]
    parts += [{"type": "image_url", "image_url": {"url": data_url(png(64, 64))}} for _ in range(4)]
    parts += [{"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}]
    body = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    async with proxy_client(upstream, window=2048, reply_reserve=256) as client:
        response = await client.post("/compact", json=body)
    report = response.json()["report"]
    # 4 x (85 + 170) + 85 and a little text: well under the 1,638-token line.
    assert 1100 < report["tokens_before"] < 1200
    assert not report["overflow"] and not report["compacted"]

"""What an image costs in the prompt, as the providers document it.

OpenAI counts by `detail`: 85 tokens at `low`; otherwise the image is fitted into 2048x2048, its
shortest side brought down to 768, and each 512-pixel tile costs 170 more. Anthropic counts about
width x height / 750 once the long side is at most 1568. The size is read from the image's own
header when the image is inline (a data URL or base64), else the configured default is used.
Pure: no I/O, only the first bytes of an inline image are decoded.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Mapping
from typing import Any

LOW_DETAIL_TOKENS = 85
TILE_TOKENS = 170
HEADER_CHARS = 64 * 1024  # base64 characters decoded to find the size (a JPEG's SOF may follow EXIF)


def image_tokens(part: Mapping[str, Any], default: int) -> int:
    """Tokens of one image content part (`image_url`, `input_image`, or Anthropic's `image`)."""
    if part.get("type") == "image":  # Anthropic: {"type": "image", "source": {"type": "base64", "data"}}
        source = part.get("source")
        data = source.get("data") if isinstance(source, Mapping) else None
        size = image_size(data) if isinstance(data, str) else None
        return anthropic_tokens(*size) if size else default
    image = part.get("image_url")
    detail = part.get("detail")
    url = part.get("image_url") if isinstance(image, str) else None
    if isinstance(image, Mapping):
        url, detail = image.get("url"), image.get("detail", detail)
    if detail == "low":
        return LOW_DETAIL_TOKENS
    size = image_size(url) if isinstance(url, str) else None
    return openai_tokens(*size) if size else default


def openai_tokens(width: int, height: int) -> int:
    if width <= 0 or height <= 0:
        return LOW_DETAIL_TOKENS
    fit = min(1.0, 2048 / max(width, height))
    fit *= min(1.0, 768 / (min(width, height) * fit))
    return LOW_DETAIL_TOKENS + TILE_TOKENS * math.ceil(width * fit / 512) * math.ceil(height * fit / 512)


def anthropic_tokens(width: int, height: int) -> int:
    if width <= 0 or height <= 0:
        return 1
    scale = min(1.0, 1568 / max(width, height))
    return max(1, math.ceil(width * scale * height * scale / 750))


def image_size(data: str) -> tuple[int, int] | None:
    """Width and height of an inline image (a `data:` URL or bare base64), None if not readable."""
    if data.startswith("data:"):
        data = data.partition(",")[2]
    elif data.startswith(("http://", "https://")):
        return None
    chunk = data[:HEADER_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        head = base64.b64decode(chunk)
    except (binascii.Error, ValueError):
        return None
    try:
        return _size_of(head)
    except struct.error:
        return None


def _size_of(head: bytes) -> tuple[int, int] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    if head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp_size(head)
    if head.startswith(b"\xff\xd8"):
        return _jpeg_size(head)
    return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    kind = head[12:16]
    if kind == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        return width, int.from_bytes(head[27:30], "little") + 1
    if kind == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if kind == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            height, width = struct.unpack(">HH", head[i + 5 : i + 9])
            return width, height
        i += 2 + int.from_bytes(head[i + 2 : i + 4], "big")
    return None

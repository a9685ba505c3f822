"""uvicorn's httptools protocol with a limit on the request head (request line and headers).

httptools itself buffers a header of any size before the app sees it, so a hostile client could
send megabytes of headers. This counts the reads that hold nothing but an unfinished head and
answers 431 (closing the connection) past `COMPACT_MAX_HEADER_BYTES`, so at most that much plus one
read is ever buffered. Bodies are not counted here: the app limits them (`COMPACT_MAX_BODY_BYTES`).

A read counts only when it began inside a head and no head was completed during it: then every byte
of it is head. A read that completes a head (and may carry a body, a whole message or the start of
the next one) is never counted, so a long chat whose head and body arrive together is not refused.
"""

from __future__ import annotations

import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.errors import error_body

DEFAULT_MAX_HEADER_BYTES = 64 * 1024


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_header_bytes = int(os.environ.get("COMPACT_MAX_HEADER_BYTES", DEFAULT_MAX_HEADER_BYTES))
        self.in_head = True  # from the connection's start or a message's end to the next head's end
        self.heads_completed = 0
        self.head_bytes = 0

    def on_headers_complete(self) -> None:
        self.in_head, self.head_bytes = False, 0
        self.heads_completed += 1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head = True

    def data_received(self, data: bytes) -> None:
        head_only, heads_before = self.in_head, self.heads_completed
        super().data_received(data)
        if head_only and self.heads_completed == heads_before and not self.transport.is_closing():
            self.head_bytes += len(data)
            if self.head_bytes > self.max_header_bytes:
                self.send_431()

    def send_431(self) -> None:
        message = f"The request's headers are larger than the proxy's limit of {self.max_header_bytes} bytes."
        body = error_body(message, type="invalid_request_error", code="request_header_fields_too_large")
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        self.transport.write(head + body)
        self.transport.close()

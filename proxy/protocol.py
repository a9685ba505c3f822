"""uvicorn's httptools protocol with a limit on the request head (request line and headers).

httptools itself buffers a header of any size before the app sees it, so a hostile client could
send megabytes of headers. This counts a head's bytes as they arrive and answers 431 (closing the
connection) past `COMPACT_MAX_HEADER_BYTES`, before the parser has seen the read that crossed the
line, so at most the limit plus one read is ever buffered. Bodies are not counted here: the app
limits them (`COMPACT_MAX_BODY_BYTES`).

Only head bytes count. A read that begins inside a head counts up to the blank line that ends it
(which may come in this read, with the body after it, or in a later one); a read that begins inside
a body counts nothing, so a long chat whose head and body arrive together is never refused.
"""

from __future__ import annotations

import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.errors import error_body

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
HEAD_END = b"\r\n\r\n"


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_header_bytes = int(os.environ.get("COMPACT_MAX_HEADER_BYTES", DEFAULT_MAX_HEADER_BYTES))
        self.in_head = True  # from the connection's start or a message's end to the next head's end
        self.head_bytes = 0
        self.tail = b""  # the last bytes received: a head's blank line may straddle two reads

    def on_headers_complete(self) -> None:
        self.in_head, self.head_bytes = False, 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head = True

    def data_received(self, data: bytes) -> None:
        if self.in_head and not self.transport.is_closing():
            end = (self.tail + data).find(HEAD_END)
            self.head_bytes += len(data) if end < 0 else max(0, end + len(HEAD_END) - len(self.tail))
            if self.head_bytes > self.max_header_bytes:
                self.send_431()
                return
        self.tail = (self.tail + data[-3:])[-3:]
        super().data_received(data)

    def send_431(self) -> None:
        message = f"The request's headers are larger than the proxy's limit of {self.max_header_bytes} bytes."
        body = error_body(message, type="invalid_request_error", code="request_header_fields_too_large")
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        self.transport.write(head + body)
        self.transport.close()

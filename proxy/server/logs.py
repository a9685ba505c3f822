"""Logging: human-readable lines by default, JSON with `COMPACT_LOG_FORMAT=json`, and the request id
on every line a request causes (uvicorn's access line included).

Nothing here logs message contents or headers; callers log counts and names, never bodies, unless
`COMPACT_LOG_BODIES=true` asks for them.
"""

from __future__ import annotations

import contextvars
import functools
import http
import logging
import re
import time
from typing import Any

import orjson

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

# Control characters (line breaks above all) in what a line shows, as escapes: a client's value
# (a model name, a decoded path) must not start a forged line of its own in a text log.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, 0x85) if c != 0x09}
_ESCAPES |= {0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"}


# A key in a URL's query (the Gemini API's `?key=`): never in a log line.
_QUERY_KEY = re.compile(r"([?&](?:key|api[_-]?key)=)[^&\s\"]*", re.IGNORECASE)


def one_line(text: str) -> str:
    return text.translate(_ESCAPES)


def without_keys(text: str) -> str:
    """`text` with the value of any `key=` query parameter hidden."""
    return _QUERY_KEY.sub(r"\1***", text) if "key=" in text.lower() else text


class StampedFormatter(logging.Formatter):
    """`logging.Formatter` whose time stamp (the default format's) is written once a second, not
    once a line: every request writes an access line."""

    _second = -1
    _stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return f"{self._stamp},{int(record.msecs):03d}"  # as `default_msec_format` writes it


class TextFormatter(StampedFormatter):
    """The text format, one line per record whatever its message holds (a traceback still follows),
    no query key in it."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(without_keys(super().formatMessage(record)))


@functools.cache
def _status(code: int) -> str:
    """`200 OK`: the status and its phrase, as uvicorn's access line shows them."""
    try:
        return f"{code} {http.HTTPStatus(code).phrase}"
    except ValueError:
        return f"{code} "


class AccessFormatter(StampedFormatter):
    """uvicorn's access line (the client, the request line with the decoded path and query, the
    status and its phrase), kept to one line and without a key given as `?key=` (the Gemini API's).
    Without uvicorn's colours: kept to one line, they showed on a terminal as `\\x1b[1m`."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        # Set on the record itself: `uvicorn.access` goes to this handler alone (`log_config`).
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[4], int):
            client_addr, method, full_path, http_version, status_code = args
            record.client_addr = client_addr
            record.request_line = f"{method} {full_path} HTTP/{http_version}"
            record.status_code = _status(status_code)
        else:  # not the access call of the uvicorn this was written for: its message as it comes
            record.client_addr, record.request_line, record.status_code = "-", record.getMessage(), "-"
        return one_line(without_keys(super().formatMessage(record)))


class QuietBrokenStreams(logging.Filter):
    """Drops uvicorn's traceback for a response the proxy aborted because the upstream broke off
    its body: that was logged once already, as a warning, where it happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        from proxy.upstream.streaming import StreamBroken

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StreamBroken)


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, request id, message (and the traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "message": without_keys(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def log_config(level: str = "info", fmt: str = "text") -> dict[str, Any]:
    """A `logging.config.dictConfig` for uvicorn and the proxy's own loggers."""
    level = level.upper()
    text = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
    formatters: dict[str, Any] = {
        "default": {"()": JsonFormatter} if fmt == "json" else {"()": TextFormatter, "format": text},
        "access": {"()": JsonFormatter}
        if fmt == "json"
        else {
            "()": AccessFormatter,
            "fmt": '%(asctime)s %(levelname)s access [%(request_id)s] %(client_addr)s "%(request_line)s" '
            "%(status_code)s",
        },
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}, "broken_streams": {"()": QuietBrokenStreams}},
        "formatters": formatters,
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["request_id", "broken_streams"],
                "stream": "ext://sys.stderr",
            },
            "access": {
                "class": "logging.StreamHandler",
                "formatter": "access",
                "filters": ["request_id"],
                "stream": "ext://sys.stdout",
            },
        },
        "loggers": {
            "proxy": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["access"], "level": level, "propagate": False},
        },
    }

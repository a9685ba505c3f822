"""The live page, `GET /ui`: what the proxy did to each conversation, drawn as the pattern's well.

The pipeline appends one small record per compacted request (`records.py`: sizes and decisions,
never text) and, once the upstream has answered, what it reported (`answers.py`). Who a request
belongs to is `identity.py`. The per-message blocks of the well (`well.py`) are built only while a
page is watching, in a task after the request, so a proxy nobody watches pays for one small record.
`routes.py` serves the page (static files in `static/`, no build step) and its server-sent events.
"""

from __future__ import annotations

from proxy.live.entries import Record
from proxy.live.records import Records

__all__ = ["Record", "Records"]

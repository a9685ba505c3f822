"""The live page, `GET /ui`: what the proxy did to each conversation, drawn as the pattern's well.

The pipeline appends one small record per compacted request (`records.py`: sizes and decisions,
never text; `entries.py`: what a record, a conversation and SENT hold) and, once the upstream has
answered, what it reported (`answers.py`); a remote compaction the proxy answered for Codex is a
record too. Which conversation a request belongs to is `identity.py`; whose key sent it, and what a
page may see, `owners.py`. The per-message blocks of the well (`well.py`) are built only while a
page is watching, in a worker thread after the request (`drawing.py`), so a proxy nobody watches
pays for one small record. `pages.py` holds the pages watching (capped, each one's backlog bounded in bytes),
`events.py` a page's event stream, `routes.py` the routes; `shared.py` shares the records between
replicas through Redis. The page itself is `static/`: ES modules and a style sheet, no build step
(`static/main.mjs` wires them; `tests/live/page/` tests its store and layout with `node --test`).
"""

from __future__ import annotations

from proxy.live.entries import Record
from proxy.live.records import Records

__all__ = ["Record", "Records"]

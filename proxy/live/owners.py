"""Whose conversation a request is, and which conversations a page may see.

With `COMPACT_API_KEYS` set, each conversation belongs to the key that sent it, and a page sees only
its own key's conversations and totals (with `COMPACT_UI_CONTENT`, their previews too); a key of
`COMPACT_ADMIN_KEYS` sees every conversation. A key is kept as a digest (`owner_id`), which is what
the records, and the replicas through Redis, hold; the page never shows it. Without keys, every page
sees everything: nothing tells clients apart.

The key is read where `RequireApiKey` reads it (a bearer token, `x-api-key`, `api-key`,
`x-goog-api-key`): that middleware has already refused a request without a valid one.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from proxy.settings import Settings

KEY_HEADERS = (b"x-api-key", b"api-key", b"x-goog-api-key")


@dataclass(frozen=True, slots=True)
class Sight:
    """What one page may see: its key's conversations (`owner`), or every one."""

    owner: str
    everything: bool

    def sees(self, owner: str) -> bool:
        return self.everything or owner == self.owner


EVERYTHING = Sight("", everything=True)


def owner_id(key: bytes) -> str:
    """A key as the records keep it (short, and not the key)."""
    return hashlib.blake2b(key, digest_size=8, person=b"cp-ui-owner").hexdigest()


class Owners:
    """The configured keys, by what a request presents."""

    def __init__(self, settings: Settings) -> None:
        keys = [key.get_secret_value().encode() for key in settings.api_keys]
        self._ids = [(key, owner_id(key)) for key in keys]
        self.keyed = bool(keys)
        admins = {key.get_secret_value().encode() for key in settings.admin_keys}
        self._admins = {owner_id(key) for key in keys if key in admins}

    def owner_of(self, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The id of the configured key the request presents ("" without keys, or none valid)."""
        if not self._ids:
            return ""
        for given in _presented(headers):
            for key, owner in self._ids:
                if hmac.compare_digest(given, key):
                    return owner
        return ""

    def sight_of(self, headers: Iterable[tuple[bytes, bytes]]) -> Sight:
        if not self._ids:
            return EVERYTHING
        owner = self.owner_of(headers)
        return Sight(owner, everything=owner in self._admins)


def _presented(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    given = []
    for name, value in headers:
        name = name.lower()
        if name == b"authorization":
            scheme, _, bearer = value.partition(b" ")
            if scheme.lower() == b"bearer":
                given.append(bearer.strip())
        elif name in KEY_HEADERS:
            given.append(value.strip())
    return given

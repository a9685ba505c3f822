"""The pure engine: compaction, notes, the pure parts of summaries, the chat plan and its budget,
and why a request cannot fit (the figures each wire format words).

No I/O, no logging, no asyncio, even indirectly: it imports only `proxy.counting`, `proxy.errors`
and (for a type) `proxy.settings` (`tests/test_layers.py` checks what importing it loads).
"""

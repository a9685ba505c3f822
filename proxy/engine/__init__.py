"""The pure engine: compaction, notes, the pure parts of summaries, overflow parsing, the chat plan
and its budget, and why a request cannot fit (the figures each wire format words).

No I/O, no logging, no asyncio: it imports only `proxy.counting`, `proxy.settings` and `proxy.errors`.
"""

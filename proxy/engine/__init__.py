"""The pure engine: compaction, notes, the pure parts of summaries, overflow parsing, the chat plan.

No I/O, no logging, no asyncio: it imports only `proxy.counting`, `proxy.settings` and `proxy.errors`.
"""

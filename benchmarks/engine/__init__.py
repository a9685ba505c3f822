"""The engine's CPU in process, no socket: compaction against history length and window, planning a
request, each wire format's adapter, the live page's record; and whether the output stayed the same."""

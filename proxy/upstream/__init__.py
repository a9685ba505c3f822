"""Talking to the upstream: the transport, forwarding and streaming, the probes, the planner that
uses them, and the summariser's calls. It imports the engine, counting and formats, never the
bridges or the server.
"""

"""Talking to the upstream: the transport, forwarding and streaming, the probes (windows, exact
counts), and the summariser's calls. It imports the engine, counting and formats, never the
planning, the bridges or the server.
"""

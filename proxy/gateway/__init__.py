"""Inside the gateways people already run: Headroom's `/v1/compress` contract served by the proxy's
own engine (`compress.py`: the messages fit the window, one out for each one in, or, for a caller
that takes the list whole, the dropped ones merged into one marker a run or removed: `removal.py`),
the originals of what it cut on request (`originals.py`, `retrieve.py`: `/v1/retrieve/{hash}`, off
unless `COMPACT_RETRIEVE`), and audit mode (`audit.py`: forwarded untouched, what would be cut
reported).

LiteLLM's `headroom` guardrail, Kong's AI Prompt Compressor (`provider: headroom`) and Portkey's
Headroom guardrail call `/v1/compress`; LiteLLM's retrieval loop redeems the ids in `ccr_hashes`.
`routes.py` wires the parts over the proxy's pipeline and adds the routes to the app.
"""

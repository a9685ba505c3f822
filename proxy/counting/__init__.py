"""Counting tokens: the estimator, the real tokenizers, image costs, calibration, the model tables.

The lowest layer: it imports nothing of the proxy's but `proxy.errors`.
"""

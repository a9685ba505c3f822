"""What replicas share through Redis (`COMPACT_CACHE_URL`): the link (`link.SharedState`: a
background writer and reader, so no request waits for Redis) and the learned tables over it
(calibration, windows). The live page's records travel over the same link (`proxy.live.shared`)."""

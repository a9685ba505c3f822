"""Replicas sharing Redis behind haproxy: requests/s at 1, 2 and 3 of them."""

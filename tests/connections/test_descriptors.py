"""The connection cap fitted to the descriptors at start-up (`proxy/connections/descriptors.py`);
the real process under `ulimit -n 1024` is tests/process/test_redteam_connections.py's row 9."""

from __future__ import annotations

import resource

from proxy.connections.descriptors import OTHER_DESCRIPTORS, fitted_cap, raise_limit


def test_a_cap_that_fits_is_kept() -> None:
    assert fitted_cap(1000, 512, 16, 20_000).cap == 1000
    assert not fitted_cap(1000, 512, 16, 1000 + 512 + 16 + OTHER_DESCRIPTORS).warning


def test_a_cap_past_the_limit_is_lowered_beside_the_pool_and_the_reserve() -> None:
    fitted = fitted_cap(1000, 100, 16, 1024)
    assert fitted.cap == 1024 - 100 - 16 - OTHER_DESCRIPTORS
    assert "lowered from 1000 to" in fitted.warning and "ulimit -n" in fitted.warning


def test_a_pool_larger_than_the_cap_holds_as_many_connections_as_the_cap_at_most() -> None:
    """Each pooled connection was a client request's: a cap of 440 uses 440 of a pool of 512."""
    fitted = fitted_cap(1000, 512, 16, 1024)
    assert fitted.cap == (1024 - 16 - OTHER_DESCRIPTORS) // 2 == 440
    assert fitted_cap(1000, 512, 16, 64).cap == 1


def test_the_soft_limit_is_raised_only_as_far_as_needed() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert raise_limit(300) == 300 == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raise_limit(200) == 300  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

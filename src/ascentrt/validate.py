"""Argument checks shared by the public API: timeouts."""

from __future__ import annotations

import threading

from .errors import ErrorCode, InvalidArgumentError


def check_timeout(timeout) -> float | None:
    """None (wait forever) or a positive number of seconds; raises InvalidArgumentError (107000)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgumentError(f"timeout must be None or seconds > 0, got {timeout!r}",
                                   code=ErrorCode.RT_PARAM_INVALID)
    if not timeout > 0:  # also rejects NaN
        raise InvalidArgumentError(f"timeout must be None or seconds > 0, got {timeout!r}",
                                   code=ErrorCode.RT_PARAM_INVALID)
    # Beyond what threading can wait for (TIMEOUT_MAX, ~292 years) a timeout means forever.
    return None if timeout >= threading.TIMEOUT_MAX else float(timeout)

"""Argument checks shared by the public API and the commands: timeouts, the program to run."""

from __future__ import annotations

import sys
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


def program_command(command: list, usage: str) -> list:
    """The program a command runs (what follows `--`); `python` / `python3` mean this
    interpreter. Raises InvalidArgumentError naming `usage` when there is none."""
    command = list(command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise InvalidArgumentError(f"nothing to run: {usage}")
    if command[0] in ("python", "python3"):
        command[0] = sys.executable  # the interpreter ascentrt is installed in
    return command


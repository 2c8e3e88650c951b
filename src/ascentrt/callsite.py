"""Where in the user's program a call came from: the innermost frame outside ascentrt."""

from __future__ import annotations

import os
import sys
from types import FrameType

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Code ascentrt generates (the acl facade's wrappers) has a file name of this form: not a path,
# so that tools which read sources (tracebacks, coverage) take it for generated code.
GENERATED_PREFIX = "<ascentrt "
OURS = (_PACKAGE_DIR, GENERATED_PREFIX)  # what the file name of ascentrt's own code starts with


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame (from `depth` callers up) whose code lies outside the package, or None."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith(OURS):
        frame = frame.f_back
    return frame


def user_site(depth: int = 2) -> str:
    """'file.py:line' of that frame ('?' when the call came from ascentrt itself)."""
    frame = user_frame(depth)
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"

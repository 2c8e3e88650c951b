"""Where in the user's program a call came from: the innermost frame outside ascentrt."""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Code ascentrt generates (the acl facade's wrappers) has a file name of this form: not a path,
# so that tools which read sources (tracebacks, coverage) take it for generated code.
GENERATED_PREFIX = "<ascentrt "
# What the file name of code that is not the program's starts with: ascentrt's own (the folder
# with its separator: a sibling such as ascentrt_app/ is the program's, and code it made) and
# the interpreter's frozen start-up code (runpy under `python -m ascentrt ...`: a call of the
# runtime's own command is no line of the program, and named none)
OURS = (os.path.join(_PACKAGE_DIR, ""), GENERATED_PREFIX, "<frozen ")


def is_ours(filename: str) -> bool:
    """Whether code of this file name is not the program's: ascentrt's own (a file of the
    package, or code it made) or the interpreter's frozen start-up code."""
    return filename.startswith(OURS)


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame (from `depth` callers up) whose code lies outside the package, or None."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None and is_ours(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_site(depth: int = 2) -> str:
    """'file.py:line' of that frame ('?' when the call came from ascentrt itself)."""
    return site_text(user_code_site(depth + 1))


Site = tuple[CodeType, int] | str  # (code, instruction offset) of a call, or its text made already


def user_code_site(depth: int = 2) -> Site:
    """Where that frame is, as (code, offset of its instruction) ('?' when the call came from
    ascentrt itself): cheap to take, for sites kept in bulk; site_text() says it when shown.
    (A frame's f_lineno decodes the code's line table from its start on every read: most of the
    cost of noting a site.)"""
    frame = user_frame(depth)  # (depth as user_site counts it: 2 is the function calling it)
    return "?" if frame is None else (frame.f_code, frame.f_lasti)


_TEXTS: dict[tuple[int, int], tuple[CodeType, str]] = {}  # (id(code), offset) -> (code, text)


def site_text(site: Site) -> str:
    """'file.py:line' of a site from user_code_site() (a text one as it is)."""
    if isinstance(site, str):
        return site
    code, offset = site
    # Cached by identity: equal code objects may come from different files (code compares
    # by content), and the code kept beside the text tells a reused id from its first owner.
    known = _TEXTS.get((id(code), offset))
    if known is not None and known[0] is code:
        return known[1]
    line = next((n for start, end, n in code.co_lines() if start <= offset < end), None)
    text = f"{os.path.basename(code.co_filename)}:{line or code.co_firstlineno}"
    if len(_TEXTS) >= 4096:
        _TEXTS.clear()  # (a bound; texts are made again on demand)
    _TEXTS[(id(code), offset)] = (code, text)
    return text

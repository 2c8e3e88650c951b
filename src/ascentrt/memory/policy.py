"""The reuse policy of a pool: which streams may take a block freed on another stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..validate import check_flag


@dataclass
class ReusePolicy:
    """Which streams may reuse a block freed on another stream whose work is still pending."""

    follow_event_dependencies: bool = True  # the allocating stream already waits on that work
    opportunistic: bool = True              # that work has completed by now
    allow_internal_dependencies: bool = True  # the pool inserts the wait itself

    def __setattr__(self, name: str, value: Any) -> None:
        # Each field is a yes/no (set at creation and later alike): "no" would read as yes.
        super().__setattr__(name, check_flag(value, name))

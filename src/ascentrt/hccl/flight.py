"""The flight recorder: the last collectives of a communicator, kept for post-mortems."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .meeting import Meeting

RECORDS = 128  # collectives kept per communicator


@dataclass(frozen=True)
class FlightRecord:
    """One collective as the recorder saw it: op ('send/recv 1->0' for a send from rank 1 and
    its receive on rank 0), sizes, sequence number, state, and per rank its call site and times
    (ns on its device's clock, virtual on sim; 0 while not done)."""

    seq: int
    op: str
    count: int
    nbytes: int
    state: str
    ranks: tuple          # ranks taking part
    calls: tuple          # (rank, call as text, call site, posted ns, done ns) of ranks that called
    error: str
    parts: tuple = ()     # (rank, device, stream, task id) of each rank's part on its stream

    def line(self) -> str:
        """One line per collective, as dumped on a failure."""
        called = {c[0] for c in self.calls}
        missing = [r for r in self.ranks if r not in called]
        sites = ", ".join(f"r{c[0]}@{c[2]}" for c in self.calls)
        tail = f"; missing ranks {missing}" if missing else ""
        err = f"; {self.error}" if self.error else ""
        return f"#{self.seq} {self.op} count={self.count} ({self.nbytes} B) {self.state} [{sites}]{tail}{err}"


class FlightRecorder:
    """The last RECORDS meetings of one communicator (read as FlightRecords)."""

    def __init__(self) -> None:
        self._meetings: collections.deque[Meeting] = collections.deque(maxlen=RECORDS)

    def add(self, meeting: Meeting) -> None:
        """Remember a new meeting (the oldest is forgotten past RECORDS)."""
        self._meetings.append(meeting)

    def forget(self, meeting: Meeting) -> None:
        """Drop a meeting whose only call was withdrawn (it never happened)."""
        try:
            self._meetings.remove(meeting)
        except ValueError:
            pass

    def records(self) -> list[FlightRecord]:
        """Snapshots of the remembered meetings, oldest first."""
        out = []
        for m in list(self._meetings):
            calls = sorted(m.calls.values(), key=lambda c: c.rank)
            first = calls[0] if calls else None
            op = first.op if first else "?"
            if m.key[0] == "p2p":  # (both directions of a pair: named by its sender and receiver)
                op = f"send/recv {m.key[1]}->{m.key[2]}"
            out.append(FlightRecord(
                seq=m.seq, op=op, count=first.count if first else 0,
                nbytes=first.nbytes if first else 0, state=m.state, ranks=tuple(m.ranks),
                calls=tuple((c.rank, c.describe(), c.site, c.posted_ns, c.done_ns) for c in calls),
                error=str(m.error) if m.error is not None else "",
                parts=tuple((c.rank, c.stream.device.id, c.stream.id, c.task.id) for c in calls
                            if c.task is not None and c.task.id)))
        return out

    def dump(self, last: int = 8) -> str:
        """The last records as text, one line each (what a failure writes to the log)."""
        return "\n".join("  " + r.line() for r in self.records()[-last:])

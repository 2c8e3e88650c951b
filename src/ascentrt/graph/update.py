"""Task-group update: re-issue a group's tasks with new arguments, without capturing again."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Literal, Protocol

from ..engine.task import EVENT_RECORD, EVENT_WAIT, NOTIFY_RECORD, NOTIFY_WAIT, Task
from ..errors import CaptureError, ErrorCode, InvalidArgumentError, InvalidHandleError
from ..stream import Stream, resolve_stream
from ..handles import Handle

_CONTROL = (EVENT_RECORD, EVENT_WAIT, NOTIFY_RECORD, NOTIFY_WAIT)


class _Graph(Protocol):
    """What an update needs of its graph (a graph.Graph, which imports this module)."""

    id: int
    _destroyed: bool
    device: Any

    def _apply_update(self, group: TaskGroup, tasks: list[Task]) -> None: ...


class TaskGroup(Handle):
    """Nodes recorded between begin_task_group and end_task_group: they can be updated later."""

    def __init__(self, capture: object, lane: int):
        self._capture = capture      # the capture.Capture that recorded it
        self.lane = lane
        self.nodes: list[int] = []   # node indices, in capture order
        self.graph: _Graph | None = None  # the graph it belongs to, once the capture ended

    def __repr__(self) -> str:
        return f"TaskGroup(nodes={self.nodes})"


class GroupUpdate:
    """While active, tasks submitted to the stream are collected as the group's new tasks.

    Like CANN's aclmdlRICaptureTaskUpdateBegin/End: the stream is diverted (nothing runs), and
    on a clean exit the collected tasks replace the group's nodes or the update is refused.
    """

    def __init__(self, graph: _Graph, group: TaskGroup, stream: Stream | None):
        if not isinstance(group, TaskGroup):
            raise InvalidArgumentError(f"update() takes a TaskGroup, got {type(group).__name__}")
        if group.graph is not graph:
            raise InvalidArgumentError("the task group belongs to another graph",
                                       code=ErrorCode.RT_MODEL_UPDATE_FAILED)
        self.graph, self.group = graph, group
        self.stream = resolve_stream(stream)
        if self.stream.device is not graph.device:  # (the new tasks run on the graph's device)
            raise InvalidArgumentError(f"graph {graph.id} belongs to device {graph.device.id}, "
                                       f"stream {self.stream.id} to device "
                                       f"{self.stream.device.id}", code=ErrorCode.RT_STREAM_CONTEXT)
        self.tasks: list[Task] = []
        self.refused: str | None = None

    def add(self, stream: Stream, task: Task) -> int:
        """Collect a task submitted to the diverted stream (control tasks change topology)."""
        if task.kind in _CONTROL:
            self.refused = f"a {task.kind_name} was submitted during the update (topology change)"
            raise CaptureError(f"graph {self.graph.id}: task group update refused: {self.refused}",
                               code=ErrorCode.RT_MODEL_UPDATE_FAILED)
        self.tasks.append(task)
        return len(self.tasks)

    def refuse(self, stream: Stream, what: str) -> None:
        """Host calls on the diverted stream (synchronize, query) go on: they see its earlier work."""

    def refuse_free(self, stream: Stream, buf: object) -> None:
        """A stream-ordered free on the diverted stream goes on: it follows its earlier work."""

    def __enter__(self) -> Stream:
        s = self.stream
        if s._capture is not None:
            raise CaptureError(f"stream {s.id} is capturing or updating already",
                               code=ErrorCode.RT_STREAM_CAPTURED)
        if self.graph._destroyed:
            raise InvalidHandleError(f"graph {self.graph.id} was destroyed")
        s._capture = self
        return s

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self.stream._capture = None
        if exc_type is not None:
            return False  # the caller's error propagates; the graph is unchanged
        if self.refused is not None:
            raise CaptureError(f"graph {self.graph.id}: task group update refused: {self.refused}",
                               code=ErrorCode.RT_MODEL_UPDATE_FAILED)
        self.graph._apply_update(self.group, self.tasks)
        return False

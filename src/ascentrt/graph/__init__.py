"""Task graphs: stream capture and replay, and scheduling a task DAG onto streams."""

from .capture import (CaptureError, CaptureMode, CaptureStatus, TaskGroup, begin_capture,
                      capture_status, end_capture)
from .graph import Graph
from .schedule import Schedule
from .taskgraph import TaskGraph, TaskNode

__all__ = ["CaptureError", "CaptureMode", "CaptureStatus", "Graph", "Schedule", "TaskGraph",
           "TaskGroup", "TaskNode", "begin_capture", "capture_status", "end_capture"]

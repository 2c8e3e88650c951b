"""The engine: stream queues, dependency tracking, dispatch to executors, completion."""

from .hooks import Hooks, check_sync_allowed, current_task
from .scheduler import ENGINE, PRIORITY_LEVELS, DeviceQueues, Engine
from .task import Marker, Task

__all__ = ["ENGINE", "PRIORITY_LEVELS", "DeviceQueues", "Engine", "Hooks", "Marker", "Task",
           "check_sync_allowed", "current_task"]

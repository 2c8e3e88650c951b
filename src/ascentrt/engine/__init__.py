"""The engine: stream queues, dependency tracking, dispatch to executors, completion."""

from .scheduler import (ENGINE, PRIORITY_LEVELS, DeviceQueues, Engine, Hooks, check_sync_allowed,
                        current_task)
from .task import Marker, Task

__all__ = ["ENGINE", "PRIORITY_LEVELS", "DeviceQueues", "Engine", "Hooks", "Marker", "Task",
           "check_sync_allowed", "current_task"]

"""The virtual-time fleet: clock, task lifecycle, server view, modes (host side)."""

from .clientmap import ClientMap
from .config import FleetConfig, StopRule
from .events import EventKind, EventQueue
from .knowledge import Knowledge
from .lifecycle import Interruption, Timeline, task_timeline
from .snapshot import SnapshotError, SnapshotPolicy

__all__ = ["ClientMap", "FleetConfig", "StopRule", "EventKind", "EventQueue", "Knowledge", "Interruption",
           "Timeline", "task_timeline", "SnapshotError", "SnapshotPolicy"]

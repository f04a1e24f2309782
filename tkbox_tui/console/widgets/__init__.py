"""The console's widgets, one per module."""

from .approvals_badge import ApprovalsBadge
from .box_detail import BoxDetail
from .box_table import BoxTable
from .command_bar import CommandBar
from .event_log import EventLog
from .exec_panel import ExecPanel

__all__ = ["ApprovalsBadge", "BoxDetail", "BoxTable", "CommandBar", "EventLog", "ExecPanel"]

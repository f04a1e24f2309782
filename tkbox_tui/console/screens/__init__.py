"""The console's screens and modals, one per module."""

from .approval_prompt import ApprovalPrompt
from .approvals_screen import ApprovalsScreen
from .box_screen import BoxScreen
from .confirm_modal import ConfirmModal
from .event_screen import EventScreen
from .help_screen import HelpScreen
from .main_screen import MainScreen
from .new_box_screen import NewBoxScreen
from .reject_reason_modal import RejectReasonModal

__all__ = ["ApprovalPrompt", "ApprovalsScreen", "BoxScreen", "ConfirmModal", "EventScreen", "HelpScreen",
           "MainScreen", "NewBoxScreen", "RejectReasonModal"]

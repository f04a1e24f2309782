"""The console's screens and modals, one per module."""

from .allow_confirm_modal import AllowConfirmModal
from .apply_confirm_modal import ApplyConfirmModal
from .approval_prompt import ApprovalPrompt
from .approvals_screen import ApprovalsScreen
from .box_screen import BoxScreen
from .confirm_modal import ConfirmModal
from .daemon_screen import DaemonScreen
from .event_screen import EventScreen
from .export_form_modal import ExportFormModal
from .help_screen import HelpScreen
from .main_screen import MainScreen
from .network_screen import NetworkScreen
from .new_box_screen import NewBoxScreen
from .reject_reason_modal import RejectReasonModal
from .review_screen import PatchReviewScreen
from .verify_screen import VerifyReportScreen

__all__ = ["AllowConfirmModal", "ApplyConfirmModal", "ApprovalPrompt", "ApprovalsScreen", "BoxScreen", "ConfirmModal",
           "DaemonScreen", "EventScreen", "ExportFormModal", "HelpScreen", "MainScreen", "NetworkScreen", "NewBoxScreen",
           "PatchReviewScreen", "RejectReasonModal", "VerifyReportScreen"]

"""The console's screens and modals, one per module."""

from .confirm_modal import ConfirmModal
from .help_screen import HelpScreen
from .main_screen import MainScreen
from .new_box_screen import NewBoxScreen

__all__ = ["ConfirmModal", "HelpScreen", "MainScreen", "NewBoxScreen"]

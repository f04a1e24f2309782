"""The console's screens and modals, one per module."""

from .box_screen import BoxScreen
from .confirm_modal import ConfirmModal
from .event_screen import EventScreen
from .help_screen import HelpScreen
from .main_screen import MainScreen
from .new_box_screen import NewBoxScreen

__all__ = ["BoxScreen", "ConfirmModal", "EventScreen", "HelpScreen", "MainScreen", "NewBoxScreen"]

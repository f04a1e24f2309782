"""``ConsoleSettings``: everything the console can be told at start, passed explicitly to ``make_app``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .approvals_state import KEEP_SETTLED
from .keymap import config_dir
from .prompt_gate import ARM_DELAY, TYPING_PAUSE
from .saved_settings import SAVED_SETTINGS_NAME
from .state import DEFAULT_EVENT_RING
from .themes import SHIPPED_THEMES_DIR


@dataclass
class ConsoleSettings:
    """Defaults suit an operator; tests turn off watchers and blinking and make reconnects immediate."""

    theme: str | None = None
    """The theme to start with; None: the one the operator last chose (``console.json``), else ``DEFAULT_THEME``.
    Either falls back to the default, with one notification, when it is not available."""
    config_dir: Path = field(default_factory=config_dir)
    """Where ``config.yaml`` (keymap), ``themes/`` (user themes) and ``console.json`` (the console's own settings:
    the chosen theme) live."""
    shipped_themes_dir: Path = SHIPPED_THEMES_DIR
    event_ring: int = DEFAULT_EVENT_RING
    """How many events the console keeps (the daemon keeps them all)."""
    start_events: int = 1000
    """How many of the newest events the console shows at start; older ones come a page at a time (``log.older``,
    or scrolling to the top of the event log)."""
    older_page: int = 1000
    """How many events one page back asks for."""
    render_interval: float = 0.1
    """Seconds between log/table renders during a flood of events."""
    box_refresh_interval: float = 0.5
    """Seconds between fetches of boxes that events touched (exec counts, connections, approvals)."""
    reconnect_initial: float = 0.25
    reconnect_maximum: float = 5.0
    watch_themes: bool = True
    """Reload user themes when their files change."""
    cursor_blink: bool = True
    tick_interval: float = 1.0
    """Seconds between refreshes of ages, times left and the approvals' countdowns (0 turns it off, for
    snapshots)."""
    approvals_kept_for: float = KEEP_SETTLED
    """Seconds an answered, expired, withdrawn or lost approval stays in the inbox, marked."""
    prompt_typing_pause: float = TYPING_PAUSE
    """Seconds without typing in a focused text input before the approval prompt may open (``prompt_gate``)."""
    prompt_arm_delay: float = ARM_DELAY
    """Seconds after the prompt shows an approval before its keys answer it (``prompt_gate``)."""
    prompt_recheck_interval: float = 0.1
    """Seconds between looks, while the prompt waits for the operator to stop typing."""
    freeze_startup_heap: bool = False
    """Once the main screen is up, keep the objects alive then out of the garbage collector's passes
    (``gc_tuning.freeze_startup_heap``).  For a process that runs one console: ``run_console`` and the bench turn it
    on; tests, which run many consoles in one process, leave it off."""

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.yaml"

    @property
    def user_themes_dir(self) -> Path:
        return self.config_dir / "themes"

    @property
    def saved_settings_file(self) -> Path:
        """What the console remembers between runs, written by the console itself (``saved_settings.py``)."""
        return self.config_dir / SAVED_SETTINGS_NAME

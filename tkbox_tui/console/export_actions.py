"""``ExportActionsMixin``: the App's side of export and verify — ``E`` on a box asks where to write its run (a small
form with a default), then exports and verifies it on the report screen; ``:verify PATH [--trust PATH]`` verifies
any bundle (the trust file defaults to the one beside it, as ``tkbox export`` names it).

Export and verify run on ``VerifyReportScreen`` (its workers); nothing here calls the daemon.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..terminal_text import safe_text
from .export_files import default_bundle_name
from .screens.export_form_modal import ExportFormModal, ExportTarget
from .screens.verify_screen import VerifyReportScreen
from .verify_run import default_trust_path

LIVE_STATES = ("creating", "running", "held", "stopping")
"""A box in one of these states has a run still being written: the daemon refuses to export it (stop it first)."""


class VerifyArgumentsError(ValueError):
    """``:verify``'s arguments are not ``PATH [--trust PATH]``; the message says what works."""


def parse_verify_arguments(text: str, cwd: Path) -> tuple[Path, Path]:
    """``"run.tkb --trust t.json"`` → the bundle and trust paths, absolute (from ``cwd``); quotes as in a shell."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise VerifyArgumentsError(f":verify PATH [--trust PATH]: {exc}") from None
    trust: str | None = None
    if "--trust" in words:
        at = words.index("--trust")
        if at + 1 >= len(words):
            raise VerifyArgumentsError(":verify PATH --trust PATH: --trust needs the trust file's path")
        trust = words[at + 1]
        del words[at:at + 2]
    if len(words) != 1 or words[0].startswith("-"):
        raise VerifyArgumentsError(":verify takes one bundle path, then optionally --trust PATH, e.g. "
                                   ":verify ./run.tkb --trust ./run.trust.json")
    bundle = (cwd / Path(words[0]).expanduser()).absolute()
    return bundle, (cwd / Path(trust).expanduser()).absolute() if trust else default_trust_path(bundle)


class ExportActionsMixin:
    """Mixed into ``ConsoleApp`` (which provides ``client``, ``settings``, ``push_screen``, ``notify`` and
    ``_selected_or_warn``)."""

    def action_export_box(self) -> None:
        """``E``: the form (default ``./<box>-<run>.tkb``), then export and verify on the report screen."""
        app: Any = self
        box = app._selected_or_warn()
        if box is None:
            return
        if box.state in LIVE_STATES:
            app.notify(f"{safe_text(box.name)} is {safe_text(box.state)}: its run is exported once the box is stopped "
                       "(x stops it)", title="nothing to export yet", severity="warning", markup=False)
            return

        def export(target: ExportTarget | None) -> None:
            if target is not None:
                app.push_screen(VerifyReportScreen(target.bundle, target.trust, client=app.client, box=box,
                                                   replace=target.replace))

        app.push_screen(ExportFormModal(box.name, f"./{default_bundle_name(box)}",
                                        cursor_blink=app.settings.cursor_blink), export)

    def verify_bundle_at(self, text: str) -> None:
        """``:verify PATH [--trust PATH]``: the report screen for that bundle."""
        app: Any = self
        try:
            bundle, trust = parse_verify_arguments(text, Path.cwd())
        except VerifyArgumentsError as exc:
            app.notify(str(exc), severity="warning", markup=False)
            return
        app.push_screen(VerifyReportScreen(bundle, trust))

"""``NetworkActionsMixin``: the App's side of the network view — keep ``NetworkState`` current from the event stream,
open the view (``w``, ``:network [BOX]``), and allow or block a host through the daemon's allowlist API in workers.

An allow asks the daemon first for a dry run of the change (``change_allowlist(..., dry_run=True)``): its answer
says what would be added and removed and, from the box's own earlier attempts, which held or refused connections
the new entry would have let through (the daemon's replay, with the daemon's matching rules: the console matches
nothing itself).  The confirm shows that, with the urls this console saw for each; only ``y`` sends the change.  A
block is one key: it only ever lets less through.  Either change is recorded by the daemon in the box's run
(``tkbox.allowlist``) and announced as ``egress.allowlist``, which the view then shows.
"""

from __future__ import annotations

from typing import Any

from textual import work

from tkbox_daemon.wire import Event

from ..client import DaemonError
from ..terminal_text import safe_text
from .network_state import HostKey, NetworkState
from .network_text import allow_confirm_text, allow_entry, block_entry, change_summary
from .screens.allow_confirm_modal import AllowConfirmModal
from .screens.network_screen import NetworkScreen


class NetworkActionsMixin:
    """Mixed into ``ConsoleApp`` (which provides ``client``, ``state``, ``screen``, ``push_screen``, ``notify`` and
    ``_select_named``)."""

    network: NetworkState

    def init_network(self) -> None:
        self.network = NetworkState()

    def take_network_events(self, batch: list[Event]) -> None:
        """Apply the ``egress.*`` events of a batch the App just took (already new to ``ConsoleState``); an open
        view redraws from the state on its own timer."""
        apply = self.network.apply
        for event in batch:
            if event.kind.startswith("egress."):
                apply(event)

    # -- opening the view -------------------------------------------------------------------------------------

    def action_open_network(self) -> None:
        """``w``: the selected box's hosts (every box's when none is selected)."""
        app: Any = self
        self.open_network(app.state.selected_box_id)

    def open_network(self, box_id: str | None) -> None:
        app: Any = self
        if isinstance(app.screen, NetworkScreen):
            return
        app.push_screen(NetworkScreen(box_id))

    def _command_network(self, argument: str) -> None:
        """``:network``: every box's hosts; ``:network BOX``: that box's."""
        app: Any = self
        if not argument:
            self.open_network(None)
        elif app._select_named(argument):
            self.open_network(app.state.selected_box_id)

    # -- allow and block --------------------------------------------------------------------------------------

    def _box_label(self, box_id: str) -> str:
        app: Any = self
        name = app.state.box_names.get(box_id)
        return safe_text(name) if name else safe_text(box_id)

    def request_allow_host(self, key: HostKey) -> None:
        """``a`` in the view: the daemon's dry run first, then the confirm (``_show_allow_confirm``)."""
        self._preview_allow(key, allow_entry(key))

    @work(group="network-allowlist", exit_on_error=False, description="preview an allowlist change")
    async def _preview_allow(self, key: HostKey, entry: str) -> None:
        app: Any = self
        label = self._box_label(key.box_id)
        try:
            change = await app.client.change_allowlist(key.box_id, "allow", [entry], dry_run=True)
        except DaemonError as exc:
            self._refused("allow", entry, label, exc)
            return
        if not change.added and not change.removed:
            app.notify(change_summary(change, label), title=f"allow {safe_text(entry)}", timeout=8, markup=False)
            return
        text = allow_confirm_text(entry, change, self.network, key.box_id)
        app.push_screen(AllowConfirmModal(f"Allow {safe_text(entry)} in {label}?", text),
                        lambda yes: self._change_allowlist(key.box_id, "allow", entry) if yes else None)

    def block_host(self, key: HostKey) -> None:
        """``b`` in the view: block the host on every port (one key: a block only ever lets less through)."""
        self._change_allowlist(key.box_id, "block", block_entry(key))

    @work(group="network-allowlist", exit_on_error=False, description="change an allowlist")
    async def _change_allowlist(self, box_id: str, action: str, entry: str) -> None:
        app: Any = self
        label = self._box_label(box_id)
        try:
            change = await app.client.change_allowlist(box_id, action, [entry])
        except DaemonError as exc:
            self._refused(action, entry, label, exc)
            return
        app.notify(change_summary(change, label), title=f"{action} {safe_text(entry)}", timeout=8, markup=False)

    def _refused(self, action: str, entry: str, label: str, exc: DaemonError) -> None:
        app: Any = self
        hint = exc.extra.get("hint")
        app.notify(f"{safe_text(exc.message)}" + (f"\n{safe_text(hint)}" if isinstance(hint, str) and hint else "")
                   + "\nNothing changed.", title=f"{action} {safe_text(entry)} in {label} refused", severity="error",
                   timeout=12, markup=False)

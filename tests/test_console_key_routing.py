"""Keys typed ahead follow the focus: the letters typed right after ``e``, ``/``, ``:`` or ``n`` land in the panel,
line or form that key opened, and never run the screen's bindings behind it (``KeyRoutingMixin``).

The keys are handed to the App the way its terminal driver hands over fast typing (all at once, before any is
handled); Pilot's ``press`` waits for the App to settle after every key, which hides the race."""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.widgets import Input

from tests.console_fakes import FakeDaemonClient, fixed_clock, quiet_settings, two_boxes, wait_until
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import NewBoxScreen
from tkbox_tui.console.widgets import CommandBar, ExecPanel


def _app(tmp_path: Path):
    fake = FakeDaemonClient(two_boxes())
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)


def _type_ahead(app, keys: str) -> None:
    for key in keys:
        name = {"/": "slash", ":": "colon"}.get(key, key)
        key_event = events.Key(name, key)
        key_event.set_sender(app)
        app._driver.send_message(key_event)


async def test_typed_after_e_the_letters_are_the_command_and_no_box_action_runs(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        _type_ahead(app, "exdq")
        argv = app.main_screen.query_one(ExecPanel).query_one("#exec-argv", Input)
        await wait_until(pilot, lambda: argv.value == "xdq" or app.screen is not app.main_screen)
        assert app.screen is app.main_screen and app.is_running  # no "Stop box?", no "Remove box?", no quit


async def test_typed_after_slash_the_letters_are_the_filter(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        _type_ahead(app, "/denied")
        bar = app.main_screen.query_one(CommandBar)
        await wait_until(pilot, lambda: bar.value == "denied" or app.screen is not app.main_screen)
        assert app.screen is app.main_screen and bar.mode == "filter"


async def test_typed_after_n_the_letters_are_the_new_boxs_name(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        _type_ahead(app, "nweb")
        await wait_until(pilot, lambda: isinstance(app.screen, NewBoxScreen)
                         and app.screen.query_one("#field-name", Input).value.endswith("web"))
        assert app.screen.query_one("#field-name", Input).value == "web"

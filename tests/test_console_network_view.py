"""The network view driven with Pilot against ``FakeDaemonClient``: ``w`` and ``:network [BOX]`` open it; its rows
count what the egress events said, live; ``v`` switches between a box and every box; ``b`` blocks the row's host
through the client; ``a`` asks the daemon for a dry run and shows what the allow would have let through before
``y`` sends it (``n`` sends nothing); a daemon's refusal is reported; keys typed ahead act on the row they reach."""

from __future__ import annotations

from rich.text import Text

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    record_notifications,
    two_boxes,
    wait_until,
)
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.keymap import BINDING_IDS
from tkbox_tui.console.screens import AllowConfirmModal, HelpScreen, MainScreen, NetworkScreen
from tkbox_tui.console.widgets import CommandBar

GITHUB = "https://api.github.com:443"
FILES = "http://files.example.org:80/simple/requests/?page=2"


def egress_history() -> list:
    """web-api (b1): three connections to GitHub, one to files.example.org held, rejected and refused, one to a
    metadata address refused; batch-jobs (b2): one to Debian."""
    events = [("b1", "box.created", {"name": "web-api"}),
              ("b1", "egress.allowlist", {"action": "start", "by": "settings", "entries": ["api.github.com"]})]
    for _ in range(3):
        events += [("b1", "egress.allowed", {"url": GITHUB, "address": "140.82.112.5"}),
                   ("b1", "egress.closed", {"url": GITHUB, "up": 1024, "down": 10_240})]
    events += [("b1", "egress.held", {"url": FILES, "approval_id": "apr-0000000000000001"}),
               ("b1", "egress.rejected", {"url": FILES, "approval_id": "apr-0000000000000001", "state": "rejected"}),
               ("b1", "egress.refused", {"rule": "egress-not-approved", "reason": "files.example.org:80 was not "
                                         "approved: rejected", "target": "files.example.org:80", "url": FILES}),
               ("b1", "egress.refused", {"rule": "egress-address", "reason": "169.254.169.254 is a cloud metadata "
                                         "address", "target": "169.254.169.254:80",
                                         "url": "http://169.254.169.254:80/latest/meta-data/"}),
               ("b2", "egress.allowed", {"url": "https://deb.debian.org:443", "address": "151.101.2.132"})]
    return [make_event(seq, box, kind, **data) for seq, (box, kind, data) in enumerate(events, 1)]


def network_app(tmp_path, **settings):
    fake = FakeDaemonClient(two_boxes())
    fake.history = egress_history()
    fake.allowlists["b1"] = ["api.github.com"]
    fake.would_let_through["b1"] = [{"host": "files.example.org", "port": 80, "kind": "http",
                                     "outcome": "rejected"}]
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", **settings), clock=fixed_clock)
    app.notes = record_notifications(app)  # type: ignore[attr-defined]
    return fake, app


async def open_view(app, pilot) -> NetworkScreen:
    last = len(egress_history())
    await wait_until(pilot, lambda: app.state.connected and app.state.last_seq == last)
    await pilot.press("w")
    await wait_until(pilot, lambda: isinstance(app.screen, NetworkScreen) and bool(app.screen.keys))
    return app.screen


def shown_rows(screen: NetworkScreen) -> list[tuple[str, ...]]:
    table = screen.table
    return [tuple(str(cell) if isinstance(cell, Text) else cell for cell in table.get_row_at(index))
            for index in range(table.row_count)]


def changes(fake) -> list[tuple]:
    return [call[1:] for call in fake.calls if call[0] == "change_allowlist"]


async def test_w_opens_the_selected_boxs_hosts_with_their_counts(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(app, pilot)
        assert screen.box_id == "b1"
        rows = shown_rows(screen)
        assert [row[:6] for row in rows] == [("https", "api.github.com", "443", "3", "0", "0"),
                                             ("http", "files.example.org", "80", "0", "1", "1"),
                                             ("http", "169.254.169.254", "80", "0", "0", "1")]
        assert rows[0][6:10] == ("closed", "11:00:08", "3.0 KiB", "30.0 KiB")
        assert rows[1][6] == "refused" and rows[1][10].startswith("files.example.org:80 was not approved")
        detail = dict(screen.detail)
        assert detail["counts"] == "3 allowed, 0 held, 0 refused" and detail["allowlist"] == "api.github.com"
        await pilot.press("j")
        await wait_until(pilot, lambda: dict(screen.detail)["target"] == "http files.example.org port 80")
        urls = [value for label, value in screen.detail if label in ("urls", "")]
        assert len(urls) == 3 and all(FILES in url for url in urls)  # the full url where the proxy reads it
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_new_events_update_the_open_view_in_place(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(app, pilot)
        fake.emit("b1", "egress.allowed", url=GITHUB, address="140.82.112.5")
        fake.emit("b1", "egress.closed", url=GITHUB, up=1024, down=1024)
        fake.emit("b1", "egress.held", url="tcp://db.example.net:5432", approval_id="apr-0000000000000002")
        await wait_until(pilot, lambda: len(screen.keys) == 4 and shown_rows(screen)[0][3] == "4")
        rows = shown_rows(screen)
        assert rows[0][8:10] == ("4.0 KiB", "31.0 KiB")
        assert rows[3][:7] == ("tcp", "db.example.net", "5432", "0", "1", "0", "held")


async def test_v_shows_every_boxs_hosts_and_back(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(app, pilot)
        await pilot.press("j")
        await wait_until(pilot, lambda: screen.selected is not None and screen.selected.host == "files.example.org")
        await pilot.press("v")
        await wait_until(pilot, lambda: screen.box_id is None and len(screen.keys) == 4)
        assert screen.cursor_key() == screen.selected and screen.selected.host == "files.example.org"
        await pilot.press("k")
        assert [row[:3] for row in shown_rows(screen)] == [
            ("web-api", "https", "api.github.com"), ("web-api", "http", "files.example.org"),
            ("web-api", "http", "169.254.169.254"), ("batch-jobs", "https", "deb.debian.org")]
        for _ in range(3):
            await pilot.press("j")
        await pilot.press("v")  # back to one box: the row's
        await wait_until(pilot, lambda: screen.box_id == "b2" and len(screen.keys) == 1)


async def test_network_command_opens_every_box_or_the_named_one(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.last_seq == len(egress_history()))
        app.run_command("network")
        await wait_until(pilot, lambda: isinstance(app.screen, NetworkScreen))
        assert app.screen.box_id is None
        await pilot.press("escape")
        app.run_command("net batch-jobs")
        await wait_until(pilot, lambda: isinstance(app.screen, NetworkScreen) and bool(app.screen.keys))
        assert app.screen.box_id == "b2" and shown_rows(app.screen)[0][1] == "deb.debian.org"
        await pilot.press("escape")
        bar = app.main_screen.query_one(CommandBar)
        bar.open("command", "netw")
        await pilot.press("tab")
        await wait_until(pilot, lambda: bar.value == "network ")


async def test_b_blocks_the_rows_host_through_the_client(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(app, pilot)
        await pilot.press("b")
        await wait_until(pilot, lambda: bool(changes(fake)))
        assert changes(fake) == [("b1", "block", ("api.github.com",), False)]
        await wait_until(pilot, lambda: app.network.box("b1").entries == ())
        await wait_until(pilot, lambda: dict(screen.detail).get("changed", "").startswith("block removed"))
        assert any("removed api.github.com" in note.message for note in app.notes)


async def test_a_shows_what_the_allow_would_have_let_through_and_y_sends_it(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(app, pilot)
        await pilot.press("j", "a")  # typed together: the allow is the row the cursor reached
        await wait_until(pilot, lambda: isinstance(app.screen, AllowConfirmModal))
        modal = app.screen
        assert changes(fake) == [("b1", "allow", ("files.example.org",), True)]  # the daemon's dry run only
        assert "adds:    files.example.org" in modal.text
        assert "it would have let through (1):" in modal.text
        assert "http files.example.org port 80: held, then rejected" in modal.text
        assert FILES in modal.text  # the url this console saw for it
        await pilot.press("y")
        await wait_until(pilot, lambda: len(changes(fake)) == 2)
        assert changes(fake)[1] == ("b1", "allow", ("files.example.org",), False)
        await wait_until(pilot, lambda: app.network.box("b1").entries == ("api.github.com", "files.example.org"))
        assert isinstance(app.screen, NetworkScreen) and screen is app.screen


async def test_n_on_the_allow_confirm_sends_nothing_and_a_tcp_row_allows_its_port(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(app, pilot)
        fake.emit("b1", "egress.held", url="tcp://db.example.net:5432", approval_id="apr-0000000000000002")
        await wait_until(pilot, lambda: len(screen.keys) == 4)
        await pilot.press("j", "j", "j", "a")
        await wait_until(pilot, lambda: isinstance(app.screen, AllowConfirmModal))
        assert "The entry db.example.net:5432 lets through port 5432 only" in app.screen.text
        assert "it would have let none through" in app.screen.text
        await pilot.press("n")
        assert isinstance(app.screen, NetworkScreen)
        await pilot.pause()
        assert changes(fake) == [("b1", "allow", ("db.example.net:5432",), True)]


async def test_an_allow_with_nothing_to_change_says_so_without_a_confirm(tmp_path):
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(app, pilot)
        await pilot.press("a")  # api.github.com: on the list already
        await wait_until(pilot, lambda: any("already allowed" in note.message for note in app.notes))
        assert isinstance(app.screen, NetworkScreen)
        assert changes(fake) == [("b1", "allow", ("api.github.com",), True)]


async def test_a_refused_change_is_reported_and_changes_nothing(tmp_path):
    fake, app = network_app(tmp_path)
    fake.allowlist_errors["b1"] = DaemonError("box_not_running", "box web-api is stopped; its allowlist changes "
                                              "only while it runs", 409)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(app, pilot)
        await pilot.press("b")
        await wait_until(pilot, lambda: any(note.severity == "error" for note in app.notes))
        note = next(note for note in app.notes if note.severity == "error")
        assert "is stopped" in note.message and "Nothing changed." in note.message
        assert app.network.box("b1").entries == ("api.github.com",)


async def test_the_views_keys_have_ids_and_are_listed_by_help(tmp_path):
    for owner in (NetworkScreen, AllowConfirmModal):
        assert all(binding.id in BINDING_IDS for binding in owner.BINDINGS)
    fake, app = network_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(app, pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        ids = {binding.id for _, binding in app.screen.listed}
        assert {"network.allow", "network.block", "network.scope", "network.back"} <= ids


async def test_an_empty_view_says_what_fills_it(tmp_path):
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        await pilot.press("w")
        await wait_until(pilot, lambda: isinstance(app.screen, NetworkScreen) and bool(app.screen.detail))
        assert app.screen.detail[0][1].startswith("No connection of this box seen yet")
        await pilot.press("b")
        await pilot.pause()
        assert not changes(fake)

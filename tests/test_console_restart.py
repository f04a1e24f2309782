"""The console across daemon restarts (Pilot, against ``FakeDaemonClient``): its box table is the daemon's list after
every (re)connection — replayed events never bring back a box the daemon no longer knows — a removed box's events
keep its name, and ``x``/``d`` on a ``lost`` box say what they can and cannot do."""

from __future__ import annotations

from pathlib import Path

from tests.console_fakes import (
    DROP_STREAM,
    FakeDaemonClient,
    fixed_clock,
    make_box,
    make_event,
    quiet_settings,
    until_table_drawn,
    wait_until,
)
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import ConfirmModal
from tkbox_tui.console.widgets import BoxTable, EventLog


def _app(tmp_path: Path, fake: FakeDaemonClient):
    return make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)


def _three_lives_of_demo() -> FakeDaemonClient:
    """What `tkbox up` finds after three lives of the daemon, each of which made a box named demo: the history has
    all three, the daemon knows only the last."""
    fake = FakeDaemonClient([make_box("c3", "demo")])
    fake.history = [make_event(1, "c1", "box.created", name="demo"), make_event(2, "c1", "box.stopped"),
                    make_event(3, "", "daemon.started"), make_event(4, "c2", "box.created", name="demo"),
                    make_event(5, "c2", "box.stopped"), make_event(6, "", "daemon.started"),
                    make_event(7, "c3", "box.created", name="demo"), make_event(8, "c3", "box.started")]
    return fake


async def test_a_console_started_after_restarts_shows_no_ghost_rows(tmp_path):
    fake = _three_lives_of_demo()
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        await wait_until(pilot, lambda: app.state.last_seq == 8)
        await pilot.pause()
        table = app.screen.query_one(BoxTable)
        assert table.box_ids == ["c3"] and str(table.get_row("c3")[1]) == "running"
        fake.live.put_nowait(make_event(9, "c4", "box.created", name="fresh"))  # a box made now gets its row
        await wait_until(pilot, lambda: "c4" in table.box_ids)
        assert table.box_ids == ["c3", "c4"]


async def test_after_a_reconnect_the_table_is_the_daemons_list_and_replayed_events_add_no_row(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web"), make_box("b2", "batch", "stopped")])
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        fake.live.put_nowait(make_event(1, "b1", "exec.started"))
        await wait_until(pilot, lambda: app.state.last_seq == 1)
        # the daemon restarts: a box made just before it died never reached this console, and the new daemon
        # does not know it (nor b2); b1 comes back lost
        fake.live.put_nowait(DROP_STREAM)
        fake.history += [make_event(2, "b7", "box.created", name="half-made"), make_event(3, "", "daemon.started"),
                         make_event(4, "b1", "box.lost", state="lost", reason="the daemon ended")]
        fake.box_list = [make_box("b1", "web", "lost", reason="the daemon ended")]
        table = app.screen.query_one(BoxTable)
        await wait_until(pilot, lambda: app.state.last_seq == 4)
        await wait_until(pilot, lambda: table.box_ids == ["b1"])
        await pilot.pause()
        assert table.box_ids == ["b1"] and str(table.get_row("b1")[1]) == "lost"
        assert fake.events_after == [0, 1]


async def test_a_removed_box_keeps_its_name_in_the_event_log(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web-api")])
    app = _app(tmp_path, fake)
    async with app.run_test(size=(160, 36)) as pilot:
        await until_table_drawn(app, pilot)
        fake.live.put_nowait(make_event(1, "b1", "exec.finished", exit_code=0))
        fake.live.put_nowait(make_event(2, "b1", "box.removed", state="removed"))
        table = app.screen.query_one(BoxTable)
        await wait_until(pilot, lambda: "b1" not in table.box_ids and app.state.last_seq == 2)
        app.action_toggle_scope()  # rebuilds the log from the ring: every line formatted again, after the removal
        app.action_toggle_scope()
        await pilot.pause()
        lines = [str(line) for line in app.screen.query_one(EventLog).lines]
        assert [line.split()[2] for line in lines if "#" in line] == ["web-api", "web-api"]


async def test_stop_on_a_lost_box_says_why_not_and_asks_the_daemon_nothing(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web", "lost", reason="the daemon ended while the box was running")])
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("x")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        [note] = list(app._notifications)
        assert note.message.startswith("web is lost: the daemon that ran it ended, and nothing of it runs")
        assert "d removes it" in note.message
    assert not any(call[0] == "stop_box" for call in fake.calls)


async def test_remove_on_a_lost_box_says_what_removing_it_does_then_removes_it(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web", "lost")])
    app = _app(tmp_path, fake)
    async with app.run_test(size=(160, 36)) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmModal)
        question = " ".join(str(app.screen.query_one("#confirm-question").render()).split())
        assert question.startswith("Remove lost box web? Its layers are deleted (its uids were given back when the daemon restarted)")
        await pilot.press("y")
        await wait_until(pilot, lambda: "b1" not in app.screen.query_one(BoxTable).box_ids)
    assert [call for call in fake.calls if call[0] == "remove_box"] == [("remove_box", "b1")]


async def test_a_row_the_daemon_no_longer_knows_goes_when_an_action_finds_it_gone(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "demo", "stopped")])
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await until_table_drawn(app, pilot)
        fake.box_list = []  # forgotten by the daemon while the console still shows it
        await pilot.press("d", "y")
        await wait_until(pilot, lambda: "b1" not in app.screen.query_one(BoxTable).box_ids)
        assert any(note.message == "the daemon no longer knows box demo; its row is gone"
                   for note in app._notifications)

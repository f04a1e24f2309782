"""``?``: each binding once, each key once, every key written one way (``Ctrl+P``, ``PgUp``, ``Esc``), the way
docs/keys.md writes them."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tests.console_fakes import FakeDaemonClient, fixed_clock, quiet_settings, two_boxes, wait_until
from tkbox_tui.console.app import make_app
from tkbox_tui.console.key_names import MODIFIERS, NAMED_KEYS, key_label, keys_label
from tkbox_tui.console.keymap import KEY
from tkbox_tui.console.screens import HelpScreen
from tkbox_tui.console.widgets import EventLog

# A key as a person reads it: modifiers capitalised and joined with +, then a named key, F-key or one character.
LABEL = re.compile(r"(?:(?:Ctrl|Shift|Alt|Meta|Super|Hyper)\+)*(?:[A-Z][A-Za-z]+|F\d+|\S)\Z")


async def _help_rows(app, pilot) -> list[tuple[str, str, str]]:
    await pilot.press("question_mark")
    assert isinstance(app.screen, HelpScreen)
    rows = app.screen.rows()
    await pilot.press("escape")
    await pilot.pause()
    return rows


def _check(rows: list[tuple[str, str, str]]) -> None:
    keys = [key for keys, _, _ in rows for key in keys.split(", ")]
    assert len(keys) == len(set(keys)), f"a key listed twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    ids = [binding_id for _, binding_ids, _ in rows for binding_id in binding_ids.split(", ") if binding_id]
    assert len(ids) == len(set(ids)), "a binding listed twice"
    assert all(LABEL.match(key) for key in keys), [key for key in keys if not LABEL.match(key)]
    assert not any(spelling in key for key in keys for spelling in ("pageup", "super+", "ctrl+", "escape"))


async def test_help_lists_each_key_and_each_binding_once_in_one_spelling(tmp_path):
    app = make_app(FakeDaemonClient(two_boxes()), settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)
    async with app.run_test(size=(180, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        boxes_rows = await _help_rows(app, pilot)  # the boxes table has the focus
        _check(boxes_rows)
        by_key = {keys: (ids, does) for keys, ids, does in boxes_rows}
        assert by_key["n"] == ("box.new, log.next_match", "New box; in the event log: Next match")
        assert by_key["N"] == ("log.previous_match", "Previous match (in the event log)")
        assert by_key["Ctrl+P"][1].startswith("Command palette")
        assert {"PgUp", "PgDn", "Ctrl+C, Super+C", "Shift+Tab", "Tab", "?", ":", "/", "f, G"} <= set(by_key)
        app.screen.query_one(EventLog).focus()
        await pilot.pause()
        log_rows = await _help_rows(app, pilot)
        _check(log_rows)
        assert ("n", "log.next_match", "Next match") in log_rows


def test_key_labels_follow_one_convention():
    assert [key_label(key) for key in ("ctrl+p", "super+c", "pageup", "ctrl+pagedown", "escape", "shift+tab",
                                       "question_mark", "slash", "colon", "n", "N", "f5", "enter", "ctrl+c")] == [
        "Ctrl+P", "Super+C", "PgUp", "Ctrl+PgDn", "Esc", "Shift+Tab", "?", "/", ":", "n", "N", "F5", "Enter",
        "Ctrl+C"]
    assert keys_label("f,G") == "f, G" and keys_label("escape,q,question_mark") == "Esc, q, ?"


textual_keys = st.tuples(st.lists(st.sampled_from(sorted(set(MODIFIERS) - {"hyper"})), max_size=2, unique=True),
                         st.sampled_from(sorted(NAMED_KEYS)) | st.sampled_from(["f1", "f12", "question_mark",
                                                                                "slash", "exclamation_mark"])
                         | st.characters(min_codepoint=33, max_codepoint=126).filter(lambda c: c not in ",+")
                         ).map(lambda parts: "+".join([*parts[0], parts[1]]))


@given(textual_keys)
def test_every_key_a_keymap_takes_has_a_label_in_the_convention(key):
    assert KEY.match(key)  # a key config.yaml accepts
    label = key_label(key)
    assert LABEL.match(label), label
    assert label.count("+") >= key.count("+")  # no modifier dropped


def test_docs_keys_md_writes_every_key_the_way_help_does():
    """docs/keys.md is generated from the catalogue; its key column uses ``?``'s spelling, never Textual's names."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "keys.md").read_text(encoding="utf-8")
    key_cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `") and "| `:" not in line]
    keys = [key for cell in key_cells for key in re.findall(r"`([^`]+)`", cell)]
    assert keys, "no key rows in docs/keys.md"
    assert all(LABEL.match(key) for key in keys), [key for key in keys if not LABEL.match(key)]
    assert not any(spelling in key for key in keys for spelling in ("pageup", "pagedown", "super+", "ctrl+", "escape"))

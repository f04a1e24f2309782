"""Choosing a theme: by its short name, refused with the list when unknown, kept between runs in ``console.json``
(written all or nothing, read strictly), only tkbox's themes offered, and a themes folder made after the start
watched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from textual.theme import BUILTIN_THEMES, ThemeProvider

from tests.console_fakes import FakeDaemonClient, fixed_clock, quiet_settings, two_boxes, wait_until
from tkbox_tui.console.app import make_app
from tkbox_tui.console.saved_settings import (
    MAX_SAVED_SETTINGS,
    SavedSettings,
    SavedSettingsError,
    parse_saved_settings,
    read_saved_settings,
    write_saved_settings,
)
from tkbox_tui.console.themes import THEME_NAME

SHIPPED = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]


def _app(config: Path, **overrides):
    fake = FakeDaemonClient(two_boxes())
    return make_app(fake, settings=quiet_settings(config, **overrides), clock=fixed_clock)


def _notes(app) -> list[str]:
    return [notification.message for notification in app._notifications]


async def _command(pilot, text: str) -> None:
    await pilot.press("colon", *text, "enter")
    await pilot.pause()


async def test_theme_takes_the_short_name_and_the_full_one_and_refuses_others_listing_them(tmp_path):
    app = _app(tmp_path / "config")
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        await _command(pilot, "theme high-contrast")
        assert app.theme == "tkbox-high-contrast"
        await _command(pilot, "theme light")
        assert app.theme == "tkbox-light"
        await _command(pilot, "theme tkbox-dark")
        assert app.theme == "tkbox-dark"
        await _command(pilot, "theme solarized")
        assert app.theme == "tkbox-dark"
        refusal = [note for note in _notes(app) if "solarized" in note]
        assert refusal == ["no theme named 'solarized'; the themes are: dark, high-contrast, light "
                           "(shipped ones also with their 'tkbox-' prefix)"]
        await _command(pilot, "theme [bold]x")  # markup in a name is shown as typed, never parsed
        assert any("'[bold]x'" in note for note in _notes(app))


async def test_the_chosen_theme_is_kept_for_the_next_run(tmp_path):
    config = tmp_path / "config"
    first = _app(config)
    async with first.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: first.state.connected)
        assert first.theme == "tkbox-dark" and not (config / "console.json").exists()  # starting writes nothing
        await _command(pilot, "theme light")
        await wait_until(pilot, lambda: (config / "console.json").exists())
        first.switch_theme("high-contrast")
        await wait_until(pilot, lambda: json.loads((config / "console.json").read_text()) ==
                         {"theme": "tkbox-high-contrast"})
    assert [path.name for path in config.iterdir()] == ["console.json"]  # no temporary file left behind
    second = _app(config)
    async with second.run_test(size=(120, 36), notifications=True) as pilot:
        await wait_until(pilot, lambda: second.state.connected)
        assert second.theme == "tkbox-high-contrast"
        assert _notes(second) == []


@pytest.mark.parametrize(("content", "complaint"), [
    (b'{"theme": "solarized"}', "the theme 'solarized' (kept in console.json) is not available; using tkbox-dark"),
    (b'{"theme": ', "not JSON"),
    (b'["tkbox-light"]', "not a JSON object"),
    (b'{"theme": "Bad Name!"}', "theme is not a theme name"),
    (b"\xff\xfe", "not JSON"),
    (b" " * (MAX_SAVED_SETTINGS + 1), "larger than"),
])
async def test_a_bad_saved_theme_falls_back_to_the_default_with_one_notification(tmp_path, content, complaint):
    config = tmp_path / "config"
    config.mkdir()
    (config / "console.json").write_bytes(content)
    app = _app(config)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        assert app.theme == "tkbox-dark"
        assert len(_notes(app)) == 1 and complaint in _notes(app)[0], _notes(app)
        await _command(pilot, "theme light")  # choosing again replaces the bad file
        await wait_until(pilot, lambda: (config / "console.json").read_bytes() != content)
    assert read_saved_settings(config / "console.json").theme == "tkbox-light"


async def test_a_theme_given_at_start_wins_over_the_saved_one(tmp_path):
    config = tmp_path / "config"
    write_saved_settings(config / "console.json", SavedSettings("tkbox-light"))
    app = _app(config, theme="high-contrast")
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        assert app.theme == "tkbox-high-contrast"


async def test_the_palette_offers_tkboxs_themes_and_the_users_only(tmp_path):
    themes_dir = tmp_path / "config" / "themes"
    themes_dir.mkdir(parents=True)
    (themes_dir / "mine.yaml").write_text("name: mine\ncolors: {primary: '#ff8800'}\n")
    app = _app(tmp_path / "config")
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        offered = sorted(app.available_themes)
        assert offered == sorted([*SHIPPED, "mine"])
        provider = ThemeProvider(app.screen)
        assert sorted(name for name, _ in provider.commands) == offered  # Ctrl+P → Theme
        titles = {command.title for command in app.get_system_commands(app.screen)}
        assert not any(name in title for title in titles for name in BUILTIN_THEMES)


async def test_a_themes_folder_created_after_the_start_is_watched(tmp_path):
    config = tmp_path / "home" / ".config" / "tkbox"  # not even its parents exist yet
    app = _app(config, watch_themes=True)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        await wait_until(pilot, lambda: any(w.group == "theme-watch" and w.is_running for w in app.workers))
        themes_dir = config / "themes"
        themes_dir.mkdir(parents=True)
        (themes_dir / "late.yaml").write_text("name: late\ncolors: {primary: '#ff8800'}\n"
                                              "tokens: {box-running: '#00ff00'}\n")
        await wait_until(pilot, lambda: "late" in app.console_theme_names, rounds=20_000)
        await _command(pilot, "theme late")
        assert app.theme == "late" and app.get_css_variables()["box-running"].lower() == "#00ff00"
        (themes_dir / "late.yaml").write_text("name: late\ncolors: {primary: '#ff8800'}\n"
                                              "tokens: {box-running: '#123456'}\n")
        await wait_until(pilot, lambda: app.get_css_variables()["box-running"].lower() == "#123456",
                         rounds=20_000)


# -- console.json, without the console -----------------------------------------------------------------------


def test_saved_settings_keep_keys_they_do_not_know_and_write_all_or_nothing(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "console.json"
    path.parent.mkdir()
    path.write_text('{"theme": "tkbox-dark", "later": [1, 2]}')
    saved = read_saved_settings(path)
    assert saved == SavedSettings("tkbox-dark", {"later": [1, 2]})
    write_saved_settings(path, SavedSettings("mine", saved.other))
    assert json.loads(path.read_text()) == {"theme": "mine", "later": [1, 2]}

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_saved_settings(path, SavedSettings("tkbox-light"))
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"theme": "mine", "later": [1, 2]}  # the old file, whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["console.json"]  # and no temporary file


def test_a_missing_file_is_no_saved_settings(tmp_path):
    assert read_saved_settings(tmp_path / "nothing.json") == SavedSettings()


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_give_saved_settings_with_a_theme_name_or_a_refusal(raw):
    try:
        saved = parse_saved_settings(raw)
    except SavedSettingsError:
        return
    assert saved.theme is None or THEME_NAME.match(saved.theme)


@given(st.from_regex(THEME_NAME, fullmatch=True) | st.none(),
       st.dictionaries(st.text(max_size=8).filter(lambda key: key != "theme"), st.integers() | st.text(max_size=8),
                       max_size=3))
def test_saved_settings_read_back_as_written(theme, other):
    saved = SavedSettings(theme, other)
    assert parse_saved_settings(json.dumps(saved.to_json()).encode()) == saved


def test_deep_nesting_is_refused_not_a_crash():
    with pytest.raises(SavedSettingsError):
        parse_saved_settings(b"[" * 30_000 + b"]" * 30_000)

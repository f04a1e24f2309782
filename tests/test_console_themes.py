"""Themes: shipped files validate, broken ones are reported in one notification, the default is used, live reload."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.console_fakes import FakeDaemonClient, fixed_clock, quiet_settings, two_boxes, wait_until
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import ConfirmModal, HelpScreen, NewBoxScreen
from tkbox_tui.console.themes import (
    SHIPPED_THEMES_DIR,
    TOKEN_DEFAULTS,
    ThemeError,
    load_themes,
    theme_from_data,
)
from tkbox_tui.console.widgets import BoxDetail, BoxTable, CommandBar, EventLog, ExecPanel

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_themes_load_and_set_every_tkbox_token():
    themes, failed = load_themes(SHIPPED_THEMES_DIR)
    assert failed == []
    assert {t.name for t in themes} == {"tkbox-dark", "tkbox-light", "tkbox-high-contrast"}
    for theme in themes:
        assert set(TOKEN_DEFAULTS) <= set(theme.variables)


@pytest.mark.parametrize(("data", "complaint"), [
    ({"name": "x", "colors": {"primary": "not-a-colour"}}, "not a colour"),
    ({"name": "x", "colors": {"primary": "#fff"}, "extra": 1}, "unknown key"),
    ({"name": "x", "colors": {"primary": "#fff"}, "tokens": {"box-exploding": "#fff"}}, "tokens.box-exploding"),
    ({"name": "Bad Name", "colors": {"primary": "#fff"}}, "name"),
    ({"name": "x", "colors": {}}, "primary"),
])
def test_theme_schema_is_closed_and_colours_checked(data, complaint):
    with pytest.raises(ThemeError, match=complaint):
        theme_from_data(data)


def test_stylesheets_use_theme_variables_only():
    colour_literal = re.compile(r"#[0-9a-fA-F]{3,8}(?![\w-])|\brgba?\(|\bhsl\(")
    sheets = [p.read_text() for p in (ROOT / "tkbox_tui" / "console" / "styles").glob("*.tcss")]
    widget_css = [owner.DEFAULT_CSS for owner in (BoxTable, BoxDetail, CommandBar, EventLog, ExecPanel,
                                                  ConfirmModal, HelpScreen, NewBoxScreen)]
    assert len(sheets) == 2
    for text in sheets + widget_css:
        assert not colour_literal.search(text), text
    assert "$box-running" in sheets[0] + sheets[1]


async def test_broken_user_themes_are_reported_once_and_the_default_used(tmp_path):
    themes_dir = tmp_path / "config" / "themes"
    themes_dir.mkdir(parents=True)
    (themes_dir / "broken.yaml").write_text("name: broken\ncolors: {primary: chartreuse-ish}\n")
    (themes_dir / "notyaml.yaml").write_text("name: [\n")
    (themes_dir / "mine.yaml").write_text("name: mine\ndark: true\ncolors: {primary: '#ff8800'}\n")
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", theme="broken"), clock=fixed_clock)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        theme_notes = [n for n in app._notifications if "theme file" in n.message]
        assert len(theme_notes) == 1
        assert "broken.yaml" in theme_notes[0].message and "notyaml.yaml" in theme_notes[0].message
        assert app.theme == "tkbox-dark"
        assert "mine" in app.console_theme_names
        app.switch_theme("mine")
        assert app.theme == "mine"
        assert app.get_css_variables()["box-running"] == TOKEN_DEFAULTS["box-running"]


async def test_user_theme_edits_reload_live(tmp_path):
    themes_dir = tmp_path / "config" / "themes"
    themes_dir.mkdir(parents=True)
    theme_file = themes_dir / "mine.yaml"
    theme_file.write_text("name: mine\ncolors: {primary: '#ff8800'}\ntokens: {box-running: '#00ff00'}\n")
    fake = FakeDaemonClient(two_boxes())
    settings = quiet_settings(tmp_path / "config", theme="mine", watch_themes=True)
    app = make_app(fake, settings=settings, clock=fixed_clock)
    recorded: list = []
    async with app.run_test(size=(120, 36), message_hook=recorded.append) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        assert app.get_css_variables()["box-running"].lower() == "#00ff00"
        await wait_until(pilot, lambda: any(w.group == "theme-watch" and w.is_running for w in app.workers))
        theme_file.write_text("name: mine\ncolors: {primary: '#ff8800'}\ntokens: {box-running: '#123456'}\n")
        await wait_until(pilot, lambda: app.get_css_variables()["box-running"].lower() == "#123456", rounds=5000)

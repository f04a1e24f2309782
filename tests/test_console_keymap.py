"""Keymap: every binding has an id, the user keymap remaps by id, bad entries are reported once, docs/keys.md."""

from __future__ import annotations

from pathlib import Path

from tests.console_fakes import FakeDaemonClient, fixed_clock, quiet_settings, two_boxes, wait_until
from tkbox_tui.console.app import ConsoleApp, make_app
from tkbox_tui.console.keymap import BINDING_IDS, CATALOGUE, keys_markdown, load_user_keymap, parse_keymap
from tkbox_tui.console.screens import (
    ApplyConfirmModal,
    ConfirmModal,
    ExportFormModal,
    HelpScreen,
    MainScreen,
    NewBoxScreen,
    PatchReviewScreen,
    VerifyReportScreen,
)
from tkbox_tui.console.widgets import ExecPanel
from tkbox_tui.console.widgets.review_file_table import ReviewFileTable

ROOT = Path(__file__).resolve().parents[1]


def test_every_binding_has_an_id_from_the_catalogue():
    for owner in (ConsoleApp, MainScreen, ConfirmModal, HelpScreen, NewBoxScreen, ExecPanel, PatchReviewScreen,
                  ReviewFileTable, ApplyConfirmModal, ExportFormModal, VerifyReportScreen):
        for binding in owner.BINDINGS:
            assert binding.id in BINDING_IDS, (owner, binding)
    assert len(BINDING_IDS) == len(CATALOGUE)


def test_docs_keys_md_matches_the_bindings():
    assert (ROOT / "docs" / "keys.md").read_text(encoding="utf-8") == keys_markdown(), \
        "regenerate: python -c 'from tkbox_tui.console.keymap import keys_markdown; print(keys_markdown(), end=\"\")'"


def test_parse_keymap_keeps_good_entries_and_names_bad_ones():
    keymap, problems = parse_keymap({"box.stop": "ctrl+x", "nope.nothing": "z", "log.follow": "not a key", "app.help": 3})
    assert keymap == {"box.stop": "ctrl+x"}
    assert len(problems) == 3 and "nope.nothing" in problems[0]


def test_a_broken_config_file_is_a_problem_not_a_crash(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("keymap: [unclosed\n")
    keymap, problems = load_user_keymap(config)
    assert keymap == {} and "not readable YAML" in problems[0]


async def test_remapped_key_works_and_the_old_one_no_longer_does(tmp_path):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "config.yaml").write_text("keymap:\n  box.stop: ctrl+x\n  app.help: f1\n  bogus.id: z\n"
                                            "  log.follow: 'two words'\n")
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(config_dir), clock=fixed_clock)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        warnings = [n for n in app._notifications if "Keymap" in n.message]
        assert len(warnings) == 1  # one notification for all bad entries
        assert "bogus.id" in warnings[0].message and "log.follow" in warnings[0].message
        await pilot.press("x")
        assert not isinstance(app.screen, ConfirmModal)
        await pilot.press("ctrl+x")
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("n")
        await pilot.press("f")  # the bad remap left the default in place
        assert app.state.following
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)

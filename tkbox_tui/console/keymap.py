"""Every console key binding, addressable by id: the catalogue, the user keymap from config.yaml, and docs/keys.md.

Screens and widgets build their ``BINDINGS`` from ``bindings_for(scope)``, so the catalogue is the one place a key
is declared.  Users remap by id in ``$XDG_CONFIG_HOME/tkbox/config.yaml``::

    keymap:
      box.stop: ctrl+x
      log.follow: F

A bad entry (unknown id, malformed key) is left out, the default kept, and all problems reported in one message.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from textual.binding import Binding

from .command_mode import commands_markdown
from .key_names import key_label


@dataclass(frozen=True)
class KeySpec:
    """One binding: where it lives, its id, default key(s), action and what it does."""

    scope: str
    id: str
    key: str
    action: str
    description: str
    show: bool = True
    priority: bool = False


SCOPES = {
    "app": "Everywhere",
    "main": "Main screen (boxes, events, detail)",
    "boxes": "Boxes table (when it has the focus)",
    "log": "Event log (when it has the focus)",
    "exec": "Exec panel",
    "form": "New box form",
    "confirm": "Confirm dialog",
    "help": "Help screen",
    "box_page": "Box page (its execs and their output; Enter on a box)",
    "event_page": "Event page (every field of one event; Enter in the event log)",
    "daemon_page": "Daemon page (:daemon): its health and what its host gives a box",
    "inbox": "Approvals inbox (i, or :approvals)",
    "prompt": "Approval prompt (pops up when an approval arrives)",
    "reject": "Reject with a reason (x on the prompt or in the inbox)",
    "review": "Patch review (Enter on a stopped box, p on its page, or :review)",
    "review_files": "Patch review: the files (when they have the focus)",
    "apply_confirm": "Apply confirm (a in the patch review)",
    "export_form": "Export form (E on a box)",
    "verify": "Verify report (after E, or :verify PATH)",
    "network": "Network view (w on the main screen, or :network [BOX])",
    "allow_confirm": "Allow confirm (a in the network view)",
}

CATALOGUE: tuple[KeySpec, ...] = (
    KeySpec("app", "app.quit", "q", "quit", "Quit (boxes keep running)"),
    KeySpec("app", "app.help", "question_mark", "help", "Help: keys of this screen"),
    KeySpec("app", "app.command", "colon", "command_mode", "Command mode: every action (:exec CMD, :stop, :q…)"),
    KeySpec("app", "app.approvals", "i", "open_approvals", "Approvals inbox: every pending approval", show=False),
    KeySpec("main", "box.new", "n", "new_box", "New box"),
    KeySpec("main", "box.exec", "e", "exec_box", "Exec in box"),
    KeySpec("main", "box.shell", "s", "open_shell", "Shell in box"),
    KeySpec("main", "box.stop", "x", "stop_box", "Stop box…"),
    KeySpec("main", "box.remove", "d", "remove_box", "Remove box…"),
    KeySpec("main", "box.review", "p", "review_box", "Review the stopped box's patch, file by file, and apply it",
            show=False),
    KeySpec("main", "box.export", "E", "export_box", "Export the box's run, then verify the bundle (a form first)",
            show=False),
    KeySpec("main", "box.network", "w", "app.open_network",
            "Network view: the hosts the selected box contacted (v there: every box's)", show=False),
    KeySpec("main", "log.filter", "slash", "filter_events", "Filter events"),
    KeySpec("main", "log.follow", "f,G", "follow_events", "Follow new events"),
    KeySpec("main", "log.scope", "a", "toggle_scope", "Events: all boxes / selected box"),
    KeySpec("main", "nav.down", "j", "cursor_down", "Down", show=False),
    KeySpec("main", "nav.up", "k", "cursor_up", "Up", show=False),
    KeySpec("main", "pane.next", "tab", "focus_next", "Next pane", show=False),
    KeySpec("main", "pane.previous", "shift+tab", "focus_previous", "Previous pane", show=False),
    KeySpec("boxes", "box.open", "enter", "select_cursor",
            "Open the box: a stopped box's patch review, any other box's page (its execs and their output)"),
    KeySpec("log", "log.open", "enter", "app.open_event", "Open the event at the marker (or the newest in view)"),
    KeySpec("log", "log.next_match", "n", "next_match", "Next match"),
    KeySpec("log", "log.previous_match", "N", "previous_match", "Previous match"),
    KeySpec("log", "log.older", "o", "load_older",
            "Older events: the page before the oldest shown (scrolling to the top asks for it too)", show=False),
    KeySpec("exec", "exec.interrupt", "ctrl+c", "interrupt", "Interrupt (SIGINT)", priority=True),
    KeySpec("exec", "exec.close", "escape", "close_panel", "Close exec panel"),
    KeySpec("exec", "exec.history_previous", "up", "history_previous", "Previous command run in this box", show=False),
    KeySpec("exec", "exec.history_next", "down", "history_next", "Next command run in this box", show=False),
    KeySpec("form", "form.submit", "ctrl+s", "submit", "Create the box"),
    KeySpec("form", "form.cancel", "escape", "cancel", "Cancel"),
    KeySpec("confirm", "confirm.yes", "y", "confirm", "Yes, do it"),
    KeySpec("confirm", "confirm.no", "n", "cancel", "No"),
    KeySpec("confirm", "confirm.escape", "escape", "cancel", "Cancel", show=False),
    KeySpec("help", "help.close", "escape,q,question_mark", "close", "Close help"),
    KeySpec("box_page", "box_page.back", "escape", "back", "Back: output → execs → boxes"),
    KeySpec("box_page", "box_page.copy", "y", "copy", "Copy exec (escaped)"),
    KeySpec("box_page", "box_page.refresh", "r", "refresh", "Refresh"),
    KeySpec("box_page", "box_page.forget", "d", "forget_rule", "Forget the selected remembered rule…"),
    KeySpec("box_page", "box_page.review", "p", "review", "Review the patch (a stopped box)", show=False),
    KeySpec("event_page", "event_page.back", "escape", "back", "Back"),
    KeySpec("event_page", "event_page.copy", "y", "copy", "Copy event (escaped)"),
    KeySpec("daemon_page", "daemon_page.back", "escape", "back", "Back"),
    KeySpec("daemon_page", "daemon_page.refresh", "r", "refresh", "Run the host checks again"),
    KeySpec("daemon_page", "daemon_page.copy", "y", "copy", "Copy the page (escaped)"),
    KeySpec("inbox", "inbox.approve", "a", "approve", "Approve the selected approval"),
    KeySpec("inbox", "inbox.reject", "x", "reject", "Reject the selected approval (optional reason)…"),
    KeySpec("inbox", "inbox.remember", "r", "approve_remember",
            "Approve and remember: also approve the same rule for the same program in this box from now on"),
    KeySpec("inbox", "inbox.approve_all", "A", "approve_all", "Approve every pending approval (asks first)…"),
    KeySpec("inbox", "inbox.back", "escape", "back", "Back"),
    KeySpec("inbox", "inbox.down", "j", "cursor_down", "Down", show=False),
    KeySpec("inbox", "inbox.up", "k", "cursor_up", "Up", show=False),
    KeySpec("prompt", "prompt.approve", "a", "approve", "Approve"),
    KeySpec("prompt", "prompt.reject", "x", "reject", "Reject (optional reason)…"),
    KeySpec("prompt", "prompt.remember", "r", "approve_remember", "Approve and remember for this box"),
    KeySpec("prompt", "prompt.approve_all", "A", "approve_all", "Approve every pending approval (asks first)…"),
    KeySpec("prompt", "prompt.later", "escape", "later", "Later: close; what it shows stays pending, in the inbox and the count"),
    KeySpec("reject", "reject.cancel", "escape", "cancel", "Cancel: nothing is sent (Enter sends the rejection)"),
    KeySpec("review", "review.toggle", "space", "toggle_file", "Include / exclude the selected file"),
    KeySpec("review", "review.apply", "a", "apply", "Apply the included files (asks first)…"),
    KeySpec("review", "review.view", "v", "toggle_view", "Diff: unified / side by side"),
    KeySpec("review", "review.diff_down", "J,ctrl+d", "diff_down", "Scroll the diff down half a page"),
    KeySpec("review", "review.diff_up", "K,ctrl+u", "diff_up", "Scroll the diff up half a page"),
    KeySpec("review", "review.diff_top", "less_than_sign", "diff_top", "Diff: to the top"),
    KeySpec("review", "review.diff_bottom", "greater_than_sign", "diff_bottom", "Diff: to the bottom"),
    KeySpec("review", "review.diff_left", "H", "diff_left", "Scroll the diff left", show=False),
    KeySpec("review", "review.diff_right", "L", "diff_right", "Scroll the diff right", show=False),
    KeySpec("review", "review.down", "j", "cursor_down", "Next file (in the diff: down)", show=False),
    KeySpec("review", "review.up", "k", "cursor_up", "Previous file (in the diff: up)", show=False),
    KeySpec("review", "review.refresh", "r", "refresh", "Read the preview again"),
    KeySpec("review", "review.box_page", "o", "box_page", "The box's page: its execs and their output"),
    KeySpec("review", "review.back", "escape", "back", "Back: diff → files → boxes"),
    KeySpec("review_files", "review.diff", "enter", "select_cursor", "Into the file's diff (Esc comes back)"),
    KeySpec("apply_confirm", "apply_confirm.yes", "y", "confirm", "Yes: the next step, or apply"),
    KeySpec("apply_confirm", "apply_confirm.no", "n", "cancel", "No: apply nothing"),
    KeySpec("apply_confirm", "apply_confirm.escape", "escape", "cancel", "Cancel: apply nothing", show=False),
    KeySpec("export_form", "export_form.submit", "ctrl+s", "submit", "Export and verify (Enter in the path too)"),
    KeySpec("export_form", "export_form.cancel", "escape", "cancel", "Cancel: nothing is exported"),
    KeySpec("verify", "verify.again", "r", "again", "Verify the files again"),
    KeySpec("verify", "verify.copy", "y", "copy", "Copy the report (escaped)"),
    KeySpec("verify", "verify.back", "escape", "back", "Back"),
    KeySpec("network", "network.allow", "a", "allow_host",
            "Allow the selected host in its box (first shows what it would have let through)…"),
    KeySpec("network", "network.block", "b", "block_host", "Block the selected host in its box, on every port"),
    KeySpec("network", "network.scope", "v", "toggle_scope", "Hosts: this box / every box"),
    KeySpec("network", "network.copy", "y", "copy", "Copy the selected host's details and urls (escaped)"),
    KeySpec("network", "network.back", "escape", "back", "Back"),
    KeySpec("network", "network.down", "j", "cursor_down", "Down", show=False),
    KeySpec("network", "network.up", "k", "cursor_up", "Up", show=False),
    KeySpec("allow_confirm", "allow_confirm.yes", "y", "confirm", "Yes: allow it"),
    KeySpec("allow_confirm", "allow_confirm.no", "n", "cancel", "No: change nothing"),
    KeySpec("allow_confirm", "allow_confirm.escape", "escape", "cancel", "Cancel: change nothing", show=False),
)
BINDING_IDS = frozenset(spec.id for spec in CATALOGUE)

FOOTER_HINTS = {
    "app.help": "Help", "app.command": "Commands", "app.quit": "Quit",
    "box.new": "New", "box.open": "Open", "box.exec": "Exec", "box.shell": "Shell", "box.stop": "Stop…",
    "box.remove": "Remove…", "log.filter": "Filter", "log.follow": "Follow", "log.scope": "All / this box",
    "log.open": "Open", "log.next_match": "Next match", "log.previous_match": "Previous match",
    "log.older": "Older",
    "exec.interrupt": "Interrupt", "exec.close": "Close", "box_page.back": "Back", "box_page.copy": "Copy",
    "box_page.refresh": "Refresh", "box_page.forget": "Forget rule…", "event_page.back": "Back",
    "event_page.copy": "Copy", "daemon_page.back": "Back", "daemon_page.refresh": "Check again",
    "daemon_page.copy": "Copy",
    "inbox.approve": "Approve", "inbox.reject": "Reject…", "inbox.remember": "Remember",
    "inbox.approve_all": "Approve all…", "inbox.back": "Back", "box.review": "Review",
    "box_page.review": "Review", "review.toggle": "In/out", "review.apply": "Apply…", "review.view": "Unified/split",
    "review.diff_down": "Diff down", "review.diff_up": "Diff up", "review.diff_top": "Top",
    "review.diff_bottom": "Bottom", "review.refresh": "Refresh", "review.box_page": "Box page",
    "review.back": "Back", "review.diff": "Diff", "box.export": "Export…", "verify.again": "Again",
    "verify.copy": "Copy", "verify.back": "Back", "box.network": "Network",
    "network.allow": "Allow…", "network.block": "Block", "network.scope": "This box / all", "network.copy": "Copy",
    "network.back": "Back", "allow_confirm.yes": "Allow", "allow_confirm.no": "No",
}
"""The footer's word for a binding, by id (the description stays for ``?`` and docs/keys.md): a row of full
descriptions is wider than 200 columns, and the footer cut off its last keys, ``?`` and ``:`` among them."""
FOOTER_FIRST = ("app.help", "app.command", "app.quit")
"""The keys the footer shows first, so that however narrow the terminal, it hints how to find every other."""

PANE_NAVIGATION = frozenset({"focus_next", "focus_previous", "cursor_down", "cursor_up"})
"""Actions of the main screen that still work while a panel owns the keys: moving between panes, scrolling."""


def held_by_panels() -> frozenset[str]:
    """The actions (without their ``app.`` namespace) of the App and the main screen that a panel with the focus
    (the exec panel) keeps from running: all but ``PANE_NAVIGATION``."""
    return frozenset(spec.action.removeprefix("app.") for spec in CATALOGUE
                     if spec.scope in ("app", "main")) - PANE_NAVIGATION

# A key name as Textual writes it (``ctrl+shift+x``, ``f5``, ``question_mark``) or one printable character.
KEY = re.compile(r"^(?:(?:ctrl|shift|alt|super|meta)\+)*(?:[a-z0-9_]+|[^\s,+])\Z")


def bindings_for(scope: str) -> list[Binding]:
    """The ``BINDINGS`` of one screen or widget, each with its id."""
    return [Binding(spec.key, spec.action, spec.description, show=spec.show, priority=spec.priority, id=spec.id,
                    tooltip=spec.description)
            for spec in CATALOGUE if spec.scope == scope]


def scope_bindings(scope: str, keymap: dict[str, str]) -> list[tuple[str, Binding]]:
    """(key, binding) for every key of one scope, with the user's ``keymap`` applied (for help on other panes)."""
    return [(key, binding) for binding in bindings_for(scope)
            for key in keymap.get(binding.id or "", binding.key).split(",")]


def config_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/tkbox`` (``~/.config/tkbox`` when unset)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tkbox"


def read_config(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The config file as a mapping (empty when absent) and what is wrong with it."""
    if not path.exists():
        return {}, []
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        return {}, [f"{path}: not readable YAML ({str(exc).splitlines()[0]})"]
    if loaded is None:
        return {}, []
    if not isinstance(loaded, dict):
        return {}, [f"{path}: expected a mapping at the top"]
    return loaded, []


def parse_keymap(raw: Any) -> tuple[dict[str, str], list[str]]:
    """Check a ``keymap:`` section; returns the good entries and one line per bad one."""
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, ["keymap: expected a mapping of binding id to key"]
    keymap: dict[str, str] = {}
    problems: list[str] = []
    for binding_id, keys in raw.items():
        if binding_id not in BINDING_IDS:
            problems.append(f"keymap.{binding_id}: no binding has this id (see docs/keys.md)")
        elif not isinstance(keys, str) or not keys.strip() or not all(KEY.match(k.strip()) for k in keys.split(",")):
            problems.append(f"keymap.{binding_id}: {keys!r} is not a key; write e.g. x, ctrl+x or f5")
        else:
            keymap[binding_id] = ",".join(k.strip() for k in keys.split(","))
    return keymap, problems


def load_user_keymap(config_file: Path) -> tuple[dict[str, str], list[str]]:
    """The user's keymap from ``config.yaml`` and the problems found (defaults stay for bad entries)."""
    config, problems = read_config(config_file)
    keymap, keymap_problems = parse_keymap(config.get("keymap"))
    return keymap, problems + keymap_problems


def _display_key(keys: str) -> str:
    """Keys as docs/keys.md writes them: the same spelling as ``?`` (``key_names.key_label``)."""
    return ", ".join(f"`{key_label(key)}`" for key in keys.split(",") if key.strip())


def keys_markdown() -> str:
    """docs/keys.md, generated from the catalogue (``tests/test_console_keymap.py`` checks it is current)."""
    lines = ["# Console keys", "",
             "Generated from `tkbox_tui/console/keymap.py` by `keys_markdown()`; do not edit by hand.", "",
             "Remap any key by its id in `$XDG_CONFIG_HOME/tkbox/config.yaml`:", "",
             "```yaml", "keymap:", "  box.stop: ctrl+x", "```", "",
             "Ctrl+P opens the command palette everywhere (box actions for the selected box, `theme: NAME`).", "",
             "`/` filters the event log: `box:NAME kind:PREFIX REGEX` (a case-insensitive regular expression), "
             "a leading `!` inverts it.  While the event log has the focus, `n`/`N` step between the lines that "
             "match (so `n` there is not New box); see [console.md](console.md).", "",
             "`Tab` / `Shift+Tab` move the focus between the panes shown: the boxes, the event log, and the exec "
             "panel (its output, its command line) and the `:`/`/` line while they are open.  A panel that has the "
             "focus owns the keys: while the exec panel has it, the main screen's keys and `q`, `?`, `:` do nothing "
             "(`Tab`, `Shift+Tab`, `j`/`k` still move and scroll); `Esc` leaves it.", "",
             "The footer hints `?`, `:` and `q` first, then the focused pane's keys, each with a short word; "
             "`?` lists every key with its full description.  Before them, at its left where it is never cut, "
             "the footer shows how many approvals are pending (`i approvals 0`, `i ▲ 2 approvals pending`).", "",
             "Approvals: `i` (or `:approvals`) opens the inbox from every screen.  The prompt pops up when an "
             "approval arrives and takes `a` (one key approves), `r`, `x`, `A` and `Esc`; it waits while a text "
             "input is being typed in, and ignores keys pressed in its first half second; see "
             "[console.md](console.md#approvals-the-prompt-and-the-inbox).", ""]
    for scope, title in SCOPES.items():
        lines += [f"## {title}", "", "| Key | Id | Does |", "|---|---|---|"]
        lines += [f"| {_display_key(spec.key)} | `{spec.id}` | {spec.description} |"
                  for spec in CATALOGUE if spec.scope == scope]
        lines.append("")
    return "\n".join(lines) + "\n" + commands_markdown()

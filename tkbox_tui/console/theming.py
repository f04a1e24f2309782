"""``ThemeMixin``: the App's side of themes — register shipped and user themes (and only those: Textual's built-in
themes are not offered), start with the theme the operator last chose, switch by name (``high-contrast`` or
``tkbox-high-contrast``), keep the choice in ``console.json``, and reload user themes live when their files change,
including a themes folder created after the console started (``watchfiles``)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import work
from textual.theme import BUILTIN_THEMES, Theme

from .messages import ThemesReloaded
from .saved_settings import SavedSettings, SavedSettingsError, read_saved_settings, write_saved_settings
from .themes import DEFAULT_THEME, TOKEN_DEFAULTS, broken_themes_message, load_themes

SHIPPED_PREFIX = "tkbox-"
"""The shipped themes' names start with it; ``:theme`` takes them with or without it."""
THEME_WATCH_DEBOUNCE_MS = 300
"""How long the theme watcher lets a burst of file changes settle (an editor's save) before reloading."""
THEME_WATCH_WAKE_MS = 1000
"""How often the watcher's thread wakes without a change (it checks the stop flag then)."""


class ThemeMixin:
    """Mixed into ``ConsoleApp`` (which provides ``settings``, ``notify``, ``register_theme`` …)."""

    console_theme_names: list[str]
    _theme_watch_stop: asyncio.Event | None = None
    _keeping_theme = False
    """True once the starting theme is set: from then on a theme change is the operator's and is kept."""

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(TOKEN_DEFAULTS)

    @property
    def tkbox_tokens(self) -> dict[str, str]:
        """The current theme's tkbox tokens (used for colours outside CSS, e.g. the state cells)."""
        app: Any = self
        return {**TOKEN_DEFAULTS, **app.current_theme.variables}

    def _register_themes(self, themes: list[Theme]) -> None:
        app: Any = self
        for theme in themes:
            app.register_theme(theme)
            if theme.name not in self.console_theme_names:
                self.console_theme_names.append(theme.name)

    # -- start ----------------------------------------------------------------------------------------------

    def load_console_themes(self) -> None:
        """Shipped themes, then user themes (a user theme may replace a shipped one); one notice for failures.
        Then the starting theme, and Textual's built-in themes are dropped so that no picker offers them."""
        app: Any = self
        self.console_theme_names = []
        shipped, shipped_failed = load_themes(app.settings.shipped_themes_dir)
        user, user_failed = load_themes(app.settings.user_themes_dir)
        self._register_themes(shipped + user)
        failures = shipped_failed + user_failed
        if failures:
            app.notify(broken_themes_message(failures), title="themes", severity="warning", timeout=10)
        app.theme = self._starting_theme()
        self._hide_textual_themes()
        self._keeping_theme = True

    def _starting_theme(self) -> str:
        """The theme given in the settings, else the one kept in ``console.json``, else the default; one
        notification when that one cannot be used."""
        app: Any = self
        wanted, source = app.settings.theme, "asked for"
        if wanted is None:
            wanted, source = DEFAULT_THEME, "default"
            path = app.settings.saved_settings_file
            try:
                saved = read_saved_settings(path)
            except SavedSettingsError as exc:
                app.notify(f"{path}: {exc}; using the {DEFAULT_THEME} theme", title="console settings",
                           severity="warning", timeout=10, markup=False)
            else:
                if saved.theme is not None:
                    wanted, source = saved.theme, f"kept in {path.name}"
        resolved = self.resolve_theme_name(wanted)
        fallback = DEFAULT_THEME if DEFAULT_THEME in self.console_theme_names else "textual-dark"
        if resolved is None:
            if wanted != DEFAULT_THEME:
                app.notify(f"the theme {wanted!r} ({source}) is not available; using {fallback}. "
                           f"Themes: {', '.join(self.console_theme_names) or 'none'}",
                           title="themes", severity="warning", timeout=10, markup=False)
            resolved = fallback
        return resolved

    def _hide_textual_themes(self) -> None:
        """Unregister Textual's built-in themes that are not tkbox's (when tkbox has themes at all), so the
        palette's theme picker lists tkbox's shipped themes and the user's, nothing else."""
        app: Any = self
        if not self.console_theme_names:
            return
        for name in BUILTIN_THEMES:
            if name not in self.console_theme_names and name != app.theme:
                app.unregister_theme(name)

    # -- switching ------------------------------------------------------------------------------------------

    def resolve_theme_name(self, name: str) -> str | None:
        """The registered tkbox theme that ``name`` means: itself, or with the ``tkbox-`` prefix added
        (``high-contrast`` → ``tkbox-high-contrast``); case and surrounding spaces do not matter.  None if none."""
        wanted = name.strip().lower()
        for candidate in (wanted, SHIPPED_PREFIX + wanted):
            if candidate in self.console_theme_names:
                return candidate
        return None

    def theme_choices(self) -> str:
        """The themes, as ``:theme`` takes them (shipped ones without their prefix)."""
        return ", ".join(name.removeprefix(SHIPPED_PREFIX) for name in self.console_theme_names)

    def switch_theme(self, name: str) -> None:
        """Switch to the theme ``name`` means (``resolve_theme_name``), or say which themes there are."""
        app: Any = self
        if not name.strip():
            app.notify(f"themes: {self.theme_choices()} (now: {app.theme})", markup=False)
            return
        resolved = self.resolve_theme_name(name)
        if resolved is None:
            app.notify(f"no theme named {name.strip()!r}; the themes are: {self.theme_choices()} "
                       f"(shipped ones also with their '{SHIPPED_PREFIX}' prefix)", title="theme",
                       severity="warning", markup=False)
            return
        app.theme = resolved

    def watch_theme(self, theme_name: str) -> None:
        self._recolour_tables()
        if self._keeping_theme and theme_name in self.console_theme_names:
            self._keep_theme(theme_name)

    def _recolour_tables(self) -> None:
        # State and last-event cells are coloured outside CSS, so repaint them with the new theme's tokens.
        from .widgets import BoxTable

        app: Any = self
        if app.ui_closed:
            return
        for table in app.screen_stack[0].query(BoxTable) if app.screen_stack else ():
            table.recolour(self.tkbox_tokens)

    # -- keeping the choice ---------------------------------------------------------------------------------

    def _keep_theme(self, theme_name: str) -> None:
        """Write ``theme_name`` to ``console.json``.  On the UI thread, on purpose: it is a few bytes written once
        per choice, and written before the next key is read, so a theme chosen just before quitting is kept (a
        write in a worker could be cut short by the exit)."""
        app: Any = self
        path: Path = app.settings.saved_settings_file
        try:
            saved = read_saved_settings(path)
        except SavedSettingsError:
            saved = SavedSettings()  # a bad file is replaced (it was reported at start)
        try:
            write_saved_settings(path, replace(saved, theme=theme_name))
        except OSError as exc:
            app.notify(f"the theme {theme_name} is used but not kept for next time: {path}: {exc.strerror or exc}",
                       title="console settings", severity="warning", markup=False)

    # -- live reload ----------------------------------------------------------------------------------------

    @work(exclusive=True, group="theme-watch", exit_on_error=False, description="watch user themes")
    async def watch_user_themes(self) -> None:
        """Reload user themes when the files in the themes folder change.  While the folder does not exist, watch
        its nearest existing parent (not recursively) until it does; a folder removed is waited for again."""
        from watchfiles import awatch

        app: Any = self
        directory: Path = app.settings.user_themes_dir
        self._theme_watch_stop = stop = asyncio.Event()
        while not stop.is_set() and not app.ui_closed:
            watched = directory if directory.is_dir() else _nearest_existing_parent(directory)
            first = True
            try:
                async for changes in awatch(watched, stop_event=stop, recursive=False, yield_on_timeout=True,
                                            debounce=THEME_WATCH_DEBOUNCE_MS, rust_timeout=THEME_WATCH_WAKE_MS,
                                            watch_filter=None):
                    if watched == directory:
                        if not directory.is_dir():
                            break  # removed: wait for it again
                        if first or changes:  # first: also what was written before the watch began
                            self._reload_user_themes(directory)
                    elif _next_step(watched, directory).is_dir() or not watched.is_dir():
                        break  # one step closer to the themes folder (or the parent went): watch from there
                    first = False
            except FileNotFoundError:
                continue  # what was to be watched went before the watch began: look again

    def _reload_user_themes(self, directory: Path) -> None:
        app: Any = self
        if app.ui_closed:
            return  # shutdown began: no screen to repaint, no notification to show (``LifecycleMixin``)
        themes, failed = load_themes(directory)
        app.post_message(ThemesReloaded([t.name for t in themes], [str(f) for f in failed]))
        self._register_themes(themes)
        if failed:
            app.notify(broken_themes_message(failed), title="themes", severity="warning", timeout=10)
        if app.theme in {t.name for t in themes}:
            app.refresh_css(animate=False)  # the active theme's file changed: apply its new colours
            self._recolour_tables()

    def stop_watching_themes(self) -> None:
        if self._theme_watch_stop is not None:
            self._theme_watch_stop.set()


def _nearest_existing_parent(path: Path) -> Path:
    """The closest ancestor of ``path`` that is a directory (``/`` at worst)."""
    for parent in path.parents:
        if parent.is_dir():
            return parent
    return Path(path.anchor or "/")


def _next_step(ancestor: Path, target: Path) -> Path:
    """The child of ``ancestor`` on the way to ``target`` (``ancestor`` is one of ``target``'s parents)."""
    return ancestor / target.relative_to(ancestor).parts[0]

"""``ThemeMixin``: the App's side of themes — register shipped and user themes, report broken files once,
switch themes, and reload user themes live when their files change (``watchfiles``)."""

from __future__ import annotations

import asyncio
from typing import Any

from textual import work
from textual.theme import Theme

from .messages import ThemesReloaded
from .themes import DEFAULT_THEME, TOKEN_DEFAULTS, broken_themes_message, load_themes


class ThemeMixin:
    """Mixed into ``ConsoleApp`` (which provides ``settings``, ``notify``, ``register_theme`` …)."""

    console_theme_names: list[str]
    _theme_watch_stop: asyncio.Event | None = None

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

    def load_console_themes(self) -> None:
        """Shipped themes, then user themes (a user theme may replace a shipped one); one notice for failures."""
        app: Any = self
        self.console_theme_names = []
        shipped, shipped_failed = load_themes(app.settings.shipped_themes_dir)
        user, user_failed = load_themes(app.settings.user_themes_dir)
        self._register_themes(shipped + user)
        failures = shipped_failed + user_failed
        if failures:
            app.notify(broken_themes_message(failures), title="themes", severity="warning", timeout=10)
        wanted = app.settings.theme
        if wanted not in app.available_themes:
            if wanted != DEFAULT_THEME:
                app.notify(f"theme {wanted!r} is not available; using {DEFAULT_THEME}", severity="warning")
            wanted = DEFAULT_THEME if DEFAULT_THEME in app.available_themes else "textual-dark"
        app.theme = wanted

    def switch_theme(self, name: str) -> None:
        app: Any = self
        if name not in app.available_themes:
            app.notify(f"no theme named {name!r}; themes: {', '.join(self.console_theme_names)}", severity="warning")
            return
        app.theme = name

    def watch_theme(self, theme_name: str) -> None:
        # State cells are coloured outside CSS, so repaint them with the new theme's tokens.
        from .widgets import BoxTable

        app: Any = self
        for table in app.screen_stack[0].query(BoxTable) if app.screen_stack else ():
            table.recolour(self.tkbox_tokens)

    @work(exclusive=True, group="theme-watch", exit_on_error=False, description="watch user themes")
    async def watch_user_themes(self) -> None:
        from watchfiles import awatch

        app: Any = self
        directory = app.settings.user_themes_dir
        if not directory.is_dir():
            return
        self._theme_watch_stop = asyncio.Event()
        async for _changes in awatch(directory, stop_event=self._theme_watch_stop):
            themes, failed = load_themes(directory)
            app.post_message(ThemesReloaded([t.name for t in themes], [str(f) for f in failed]))
            self._register_themes(themes)
            if failed:
                app.notify(broken_themes_message(failed), title="themes", severity="warning", timeout=10)
            if app.theme in {t.name for t in themes}:
                app.refresh_css(animate=False)  # the active theme's file changed: apply its new colours
                self.watch_theme(app.theme)

    def stop_watching_themes(self) -> None:
        if self._theme_watch_stop is not None:
            self._theme_watch_stop.set()

"""Typed application keys for the aiohttp app's shared state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from ..boxes.manager import BoxManager
    from ..events import EventBus

MANAGER: web.AppKey[BoxManager] = web.AppKey("manager")
EVENTS: web.AppKey[EventBus] = web.AppKey("events")

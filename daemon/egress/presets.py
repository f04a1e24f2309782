"""Allowlist presets, in one place: named sets of hosts that a tool needs, written ``preset:NAME`` wherever an entry
is (``--allow``, ``allow:`` in tkbox.yaml, ``tkbox allow``, ``tkbox block``).

A preset is expanded where it is named: the box's allowlist holds its entries, not the name, so a later change of
a preset never changes a running box, and the box's run records the entries it started with (the ``tkbox.box``
observation) and the presets they came from. The "Presets" section of docs/egress.md is generated from this table
(``python -m tkbox_daemon.egress.presets``); a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PREFIX = "preset:"


class UnknownPreset(ValueError):
    """``preset:NAME`` names no preset; the message lists the presets there are."""


@dataclass(frozen=True)
class Preset:
    name: str
    entries: tuple[str, ...]
    what: str
    warning: str = ""


PRESETS: dict[str, Preset] = {preset.name: preset for preset in (
    Preset("pypi", ("pypi.org", "files.pythonhosted.org"), "pip and uv installing from PyPI"),
    Preset("npm", ("registry.npmjs.org",), "npm, yarn and pnpm installing from the npm registry"),
    Preset("crates", ("index.crates.io", "static.crates.io"), "cargo fetching crates from crates.io"),
    Preset("debian", ("deb.debian.org", "security.debian.org"), "apt from Debian's mirrors (HTTP on 80 and HTTPS)"),
    Preset("github", ("github.com", "api.github.com", "codeload.github.com", "objects.githubusercontent.com",
                      "raw.githubusercontent.com"), "git clone over HTTPS, the GitHub API, release and raw downloads"),
    Preset("anthropic", ("api.anthropic.com",), "the Anthropic API"),
    Preset("openai", ("api.openai.com",), "the OpenAI API"),
    Preset("go-proxy", ("proxy.golang.org", "sum.golang.org"), "go fetching modules through Google's module proxy",
           "the Go module proxy fetches any module from any host on the box's behalf: allowing it lets code from "
           "anywhere into the box, and every module path the box asks for (which can carry data) out to the "
           "proxy. Prefer vendored modules (go mod vendor) or a module mirror you run"),
)}


def preset_named(text: str) -> Preset:
    """The preset ``preset:NAME`` names; raises UnknownPreset."""
    name = text[len(PREFIX):]
    preset = PRESETS.get(name)
    if preset is None:
        raise UnknownPreset(f"{text[:80]!r} names no preset; the presets are "
                            f"{', '.join(PREFIX + known for known in PRESETS)}")
    return preset


def expand(items: Iterable[str]) -> tuple[list[str], tuple[str, ...]]:
    """The entry texts ``items`` stand for, each ``preset:NAME`` replaced by its entries in place, and the names of
    the presets used (in order, once each); raises UnknownPreset."""
    texts: list[str] = []
    used: list[str] = []
    for item in items:
        if item.startswith(PREFIX):
            preset = preset_named(item)
            texts.extend(preset.entries)
            if preset.name not in used:
                used.append(preset.name)
        else:
            texts.append(item)
    return texts, tuple(used)


def warnings(names: Iterable[str]) -> list[str]:
    """``WARNING preset:NAME: …`` for each named preset that carries a warning."""
    return [f"WARNING {PREFIX}{name}: {PRESETS[name].warning}" for name in names
            if name in PRESETS and PRESETS[name].warning]


def markdown() -> str:
    """The "Presets" section of docs/egress.md (between its markers), generated from ``PRESETS``."""
    rows = ["| preset | entries | for |", "|---|---|---|"]
    for preset in PRESETS.values():
        entries = ", ".join(f"`{entry}`" for entry in preset.entries)
        rows.append(f"| `{PREFIX}{preset.name}` | {entries} | {preset.what} |")
    notes = [f"\n**WARNING, `{PREFIX}{preset.name}`**: {preset.warning}." for preset in PRESETS.values()
             if preset.warning]
    return "\n".join(rows) + "\n" + "".join(note + "\n" for note in notes)


if __name__ == "__main__":
    print(markdown(), end="")

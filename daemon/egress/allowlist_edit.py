"""Changes to a box's allowlist: ``allow``, ``block`` and ``set``, each a new Allowlist and what changed (sans-IO).

An entry speaks for a set of (name, port) pairs: its names (one name, one address, or every name under a wildcard's
base) times its ports (an allow entry without a port: 443 and 80; a block without a port: every port). The rules:

- ``allow X`` adds X. It lifts the blocks on exactly X's names that share a port with X (``block a.h`` then
  ``allow a.h`` undoes the block); where such a block also held other ports shut against another entry (``*.h:8443``
  after ``block a.h``), those ports stay blocked (``!a.h:8443``). A block on wider names than X's (``!*.a.h`` over
  ``x.a.h``) is never lifted by a narrower allow: when it shuts every port of X the allow is refused and says so,
  when it shuts some, the change says which stay blocked.
- ``block X`` removes every allow entry that X covers entirely (its names and ports), and blocks that X makes
  redundant. When an entry that is left still covers some of X (``*.h`` after ``block a.h``), it adds the block
  ``!X``, which wins over every allow entry. Blocking what no entry allows changes nothing, and says so: a host off
  the list is already not let through without a person.
- ``set`` replaces the whole list; ``set []`` empties it (the kill switch: every connection then waits for a
  person, or is refused in an ``inspect: all`` box).

``allow`` and ``block`` take hosts (``!`` is written by tkbox, not by hand there); ``set`` takes entries, blocks
included. Each takes ``preset:NAME`` too (``presets.py``). A change is all or nothing: one refused item changes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .allowlist import Allowlist, Entry, EntryError, check_reachable, parse_entry
from .presets import UnknownPreset, expand, warnings

ACTIONS = ("allow", "block", "set")


class ChangeRefused(ValueError):
    """The change cannot be made as asked; nothing changed. The message says why and what to do."""


@dataclass(frozen=True)
class AllowlistChange:
    """One change: the list before and after, the entries ``added`` and ``removed``, the presets named, and
    ``notes`` for what was asked but needed nothing or stays blocked."""

    action: str
    before: Allowlist
    after: Allowlist
    added: tuple[Entry, ...]
    removed: tuple[Entry, ...]
    presets: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def summary(self, by: str) -> dict[str, object]:
        """What a record and an event say of it: action, who, the entries added and removed, notes, the count."""
        return {"action": self.action, "by": by, "added": [e.text for e in self.added],
                "removed": [e.text for e in self.removed], "presets": list(self.presets), "notes": list(self.notes),
                "count": len(self.after)}


def names_within(inner: Entry, outer: Entry) -> bool:
    """Whether every name of ``inner`` is a name of ``outer``."""
    if inner.kind != outer.kind:
        return False
    if not outer.wildcard:
        return not inner.wildcard and inner.host == outer.host
    return inner.host == outer.host if inner.wildcard else inner.host.endswith("." + outer.host)


def names_meet(one: Entry, other: Entry) -> bool:
    """Whether some name is a name of both."""
    if one.kind != other.kind:
        return False
    if one.wildcard and other.wildcard:
        return (one.host == other.host or one.host.endswith("." + other.host)
                or other.host.endswith("." + one.host))
    if one.wildcard or other.wildcard:
        wild, exact = (one, other) if one.wildcard else (other, one)
        return exact.host.endswith("." + wild.host)
    return one.host == other.host


def covers_all(outer: Entry, inner: Entry) -> bool:
    return names_within(inner, outer) and inner.ports <= outer.ports


def meets(one: Entry, other: Entry) -> bool:
    return names_meet(one, other) and bool(one.ports & other.ports)


def _same_names(one: Entry, other: Entry) -> bool:
    return (one.kind, one.host, one.wildcard) == (other.kind, other.host, other.wildcard)


def _items(action: str, items: Sequence[str]) -> tuple[list[Entry], tuple[str, ...]]:
    """The entries ``items`` name, presets expanded; raises ChangeRefused naming the item that is wrong."""
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
        raise ChangeRefused(f"{action} takes a list of host texts")
    if action != "set" and not items:
        raise ChangeRefused(f"{action} needs at least one host; to empty the list (the kill switch) set it to []")
    try:
        texts, presets = expand(items)
        entries = Allowlist.parse(texts).entries if action == "set" else [_host(action, t) for t in texts]
        if action != "block":  # a block of an address nobody can reach is harmless
            check_reachable(entries)
    except (EntryError, UnknownPreset) as exc:
        raise ChangeRefused(str(exc)) from None
    return list(entries), presets


def _host(action: str, text: str) -> Entry:
    if text.startswith("!"):
        raise ChangeRefused(f"{text!r}: {action} takes hosts; tkbox writes the ! of a block itself "
                            f"(tkbox block BOX {text[1:]})")
    try:
        return parse_entry(text)
    except EntryError as exc:
        raise ChangeRefused(f"{text[:80]!r}: {exc}") from None


def _result(action: str, before: Allowlist, entries: list[Entry], presets: tuple[str, ...],
            notes: list[str]) -> AllowlistChange:
    try:
        after = Allowlist(entries)
    except EntryError as exc:
        raise ChangeRefused(str(exc)) from None
    kept_before, kept_after = set(before.entries), set(after.entries)
    return AllowlistChange(action, before, after, tuple(e for e in after.entries if e not in kept_before),
                           tuple(e for e in before.entries if e not in kept_after), presets, tuple(notes))


def allow(current: Allowlist, items: Sequence[str]) -> AllowlistChange:
    wanted, presets = _items("allow", items)
    entries, notes = list(current.entries), []
    for entry in wanted:
        if entry in entries:
            notes.append(f"{entry.text} was already allowed")
            continue
        entries = _lift_blocks(entries, entry)
        still = [block for block in entries if block.block and names_within(entry, block)
                 and entry.ports & block.ports]
        shut = frozenset().union(*(block.ports & entry.ports for block in still)) if still else frozenset()
        if shut == entry.ports:
            wider = still[0].text[1:]
            raise ChangeRefused(f"{entry.text} stays blocked by {still[0].text}, a block on wider names, which a "
                                f"narrower allow does not reopen; allow {wider} to lift that block (it lets all of "
                                f"{wider} through), or block the entries that allow the rest and allow names one by "
                                "one")
        if still:
            notes.append(f"{entry.text} stays blocked on port {', '.join(map(str, sorted(shut)))} by "
                         f"{', '.join(block.text for block in still)}")
        narrower = [block.text for block in entries if block.block and names_within(block, entry)
                    and not _same_names(block, entry) and block.ports & entry.ports]
        if narrower:
            notes.append(f"{entry.text}: still blocked: {', '.join(narrower)}")
        entries.append(entry)
    return _result("allow", current, entries, presets, notes + warnings(presets))


def _lift_blocks(entries: list[Entry], entry: Entry) -> list[Entry]:
    """Lift the blocks on exactly ``entry``'s names that share a port with it; where such a block held other ports
    shut against another allow entry, keep those ports blocked."""
    kept: list[Entry] = []
    for block in entries:
        if not (block.block and _same_names(block, entry) and block.ports & entry.ports):
            kept.append(block)
            continue
        exposed: set[int] = set()
        for other in entries:
            if not other.block and names_meet(other, block):
                exposed |= (other.ports & block.ports) - entry.ports
        kept.extend(replace(block, port=port) for port in sorted(exposed))
    return kept


def block(current: Allowlist, items: Sequence[str]) -> AllowlistChange:
    wanted, presets = _items("block", items)
    entries, notes = list(current.entries), []
    for host in wanted:
        deny = replace(host, block=True)
        if deny in entries:
            notes.append(f"{host.text} was already blocked")
            continue
        left = [entry for entry in entries if not covers_all(deny, entry)]
        if any(not entry.block and meets(entry, deny) for entry in left):
            left.append(deny)
        elif len(left) == len(entries):
            notes.append(f"{host.text} was not allowed; nothing changed (a host off the list is not let through "
                         "without a person)")
        entries = left
    return _result("block", current, entries, presets, notes)


def replace_all(current: Allowlist, items: Sequence[str]) -> AllowlistChange:
    entries, presets = _items("set", items)
    notes = warnings(presets) if entries else ["the list is empty: nothing goes out without a person (the kill "
                                               "switch)"]
    return _result("set", current, entries, presets, notes)


def change(current: Allowlist, action: str, items: Sequence[str]) -> AllowlistChange:
    """``allow``, ``block`` or ``set`` (``ACTIONS``); raises ChangeRefused."""
    if action not in ACTIONS:
        raise ChangeRefused(f"the change is one of {', '.join(ACTIONS)}")
    return {"allow": allow, "block": block, "set": replace_all}[action](current, items)

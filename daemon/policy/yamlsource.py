"""Read a pack file's YAML strictly, keeping the line of every key and value.

The text is parsed twice: once composed with ``StrictLoader`` (a ``yaml.SafeLoader`` subclass that
rejects duplicate mapping keys, anchors, aliases, merge keys, non-scalar keys and more than one
document, and whose node tree gives the lines), and once with ``yaml.safe_load`` for the data itself.
Both are safe loaders: no YAML tag can construct a Python object. Any problem is a PolicyError that
names the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from .errors import PolicyError

MERGE_TAG = "tag:yaml.org,2002:merge"

# A key path into the loaded document, e.g. ("deny", 3, "pattern").
KeyPath = tuple[str | int, ...]


class _StrictnessError(Exception):
    """A YAML feature a pack may not use, with the mark where it was found."""

    def __init__(self, message: str, mark: yaml.Mark | None) -> None:
        super().__init__(message)
        self.mark = mark


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader whose composer refuses anchors and aliases (packs must be plain, explicit data)."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _StrictnessError(f"alias *{event.anchor} is not allowed (write the value out)", event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise _StrictnessError(f"anchor &{event.anchor} is not allowed (write the value out)",
                                   event.start_mark)
        return super().compose_node(parent, index)


@dataclass(frozen=True)
class YamlDocument:
    """The data of one pack file, and where each part of it is."""

    path: str
    data: object
    value_lines: dict[KeyPath, int]  # path -> 1-based line of the value
    key_lines: dict[KeyPath, int]    # path -> 1-based line of the mapping key that names it

    def line_of(self, path: KeyPath) -> int | None:
        """Line of the key naming ``path`` if there is one, else of its value, else of the nearest parent."""
        while True:
            if path in self.key_lines:
                return self.key_lines[path]
            if path in self.value_lines:
                return self.value_lines[path]
            if not path:
                return None
            path = path[:-1]

    def value_line_of(self, path: KeyPath) -> int | None:
        """Line where the value at ``path`` starts (falls back like ``line_of``)."""
        return self.value_lines.get(path) or self.line_of(path)


def _index(node: yaml.Node, path: KeyPath, value_lines: dict, key_lines: dict) -> None:
    """Record lines for ``node`` and everything under it; reject duplicate, merge and non-scalar keys."""
    value_lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _StrictnessError("mapping keys must be plain strings", key_node.start_mark)
            if key_node.tag == MERGE_TAG:
                raise _StrictnessError("merge keys (<<) are not allowed (write the keys out)", key_node.start_mark)
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _StrictnessError(f"duplicate key {key!r} (first at line {seen[key]})", key_node.start_mark)
            seen[key] = line
            key_lines[path + (key,)] = line
            _index(value_node, path + (key,), value_lines, key_lines)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            _index(item, path + (position,), value_lines, key_lines)


def _mark_line(mark: yaml.Mark | None) -> int | None:
    return None if mark is None else mark.line + 1


def parse_yaml(text: str, path: str) -> YamlDocument:
    """Parse one pack file's text; PolicyError (with file and line) on bad or disallowed YAML."""
    try:
        root = yaml.compose(text, Loader=StrictLoader)
        value_lines: dict[KeyPath, int] = {}
        key_lines: dict[KeyPath, int] = {}
        if root is not None:
            _index(root, (), value_lines, key_lines)
        data = yaml.safe_load(text)
    except _StrictnessError as error:
        raise PolicyError(str(error), path=path, line=_mark_line(error.mark),
                          action="packs use plain YAML: no anchors, aliases, merge keys or repeated keys") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "invalid YAML"
        raise PolicyError(f"invalid YAML: {problem}", path=path, line=_mark_line(mark),
                          action="fix the YAML syntax") from None
    except yaml.YAMLError as error:
        raise PolicyError(f"invalid YAML: {error}", path=path, action="fix the YAML syntax") from None
    return YamlDocument(path=path, data=data, value_lines=value_lines, key_lines=key_lines)

"""Tool classes: which kind of door a tool name is (shell, fs, http, mcp or unknown).

Every pack starts from BUILTIN_TOOL_CLASSES (the agent harness tool names tkbox knows) and may add
or override entries with its ``tools`` mapping, by exact name or by glob (``mcp__*``). A tool that
matches nothing is ``unknown`` and gets the pack's ``unknown_tools`` verdict.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

BUILTIN_TOOL_CLASSES: dict[str, str] = {
    # shell: a command line run by a shell
    "Bash": "shell", "run_shell_command": "shell", "shell": "shell", "local_shell": "shell",
    "container.exec": "shell", "run_terminal_cmd": "shell", "terminal": "shell",
    # fs: one file path read, written or searched
    "Write": "fs", "Edit": "fs", "MultiEdit": "fs", "NotebookEdit": "fs", "Read": "fs", "Grep": "fs",
    "Glob": "fs",
    # http: one URL fetched or searched
    "WebFetch": "http", "WebSearch": "http",
    # mcp: any Model Context Protocol tool
    "mcp__*": "mcp",
}

GLOB_CHARS = frozenset("*?[")
_CACHE_LIMIT = 4096
_CACHEABLE_NAME = 256


def is_glob(name: str) -> bool:
    return any(char in GLOB_CHARS for char in name)


class ToolClassifier:
    """Maps a tool name to its class: exact names first, then globs (the most derived pack's first)."""

    def __init__(self, exact: dict[str, str], globs: list[tuple[str, str]]) -> None:
        self.exact = dict(exact)
        self.globs = list(globs)
        self._cache: dict[str, str] = {}

    def classify(self, tool: str) -> str:
        cached = self._cache.get(tool)
        if cached is not None:
            return cached
        tool_class = self.exact.get(tool)
        if tool_class is None:
            tool_class = next((cls for glob, cls in self.globs if fnmatchcase(tool, glob)), "unknown")
        if len(tool) <= _CACHEABLE_NAME and len(self._cache) < _CACHE_LIMIT:
            self._cache[tool] = tool_class
        return tool_class

    def snapshot(self) -> dict:
        return {"exact": {name: self.exact[name] for name in sorted(self.exact)},
                "globs": [[glob, cls] for glob, cls in self.globs]}


def build_classifier(layers: list[list[tuple[str, str]]]) -> ToolClassifier:
    """Combine the builtin map with each pack's ``tools`` (base pack first, most derived last)."""
    exact: dict[str, str] = {}
    globs: dict[str, str] = {}
    for layer in [list(BUILTIN_TOOL_CLASSES.items()), *layers]:
        for name, tool_class in layer:
            if is_glob(name):
                globs.pop(name, None)
                globs[name] = tool_class  # re-inserted last: a later layer's glob wins over earlier ones
            else:
                exact[name] = tool_class
    return ToolClassifier(exact, list(reversed(list(globs.items()))))

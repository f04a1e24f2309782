"""Download then run: a file that one command line both fetches and runs, as ``fetch-run:`` reading lines.

``curl -o /tmp/x.sh URL && sh /tmp/x.sh`` is as risky as ``curl URL | sh``: nothing checks what was fetched
before it runs. ``fetch_runs`` reads the Stage facts of every pipeline of a command line (the renderer's, of
the line and of every command string it runs: ``bash -c``, ``eval``, here-documents fed to a shell...),
pairs each file written with each file run that may be the same file, and gives one line per pair:

    fetch-run: curl fetched 'https://get.example/i.sh' into '/tmp/i.sh', then ran 'sh /tmp/i.sh'

The first field lists the programs whose output reached the file, joined by ``|`` (``curl|tee`` for
``curl URL | tee f``; every program of the line for the output of a subshell or group). Which of them
fetch is the pack's decision (rule TK-D015 matches its ``downloader`` list), so the list of fetchers stays
in one place; fetchers.py only knows how programs name the files they write. The other fields are quoted
with ``'`` and hold no quote, backslash, newline or other control character (those are ``\\xNN``).

Same file: paths are compared as patterns in which ``*`` is any text (``path_patterns``): unknown parts
(``$x``, ``${x}``, ``$(...)``, ``<(...)``, globs, ``~``) are ``*``, a relative path may lie under any
directory (a ``cd`` can come between), ``./``, ``//`` and ``..`` are tidied; links already on disk are not
followed (one the line makes with ``ln`` is). Order is not considered (a loop or a function can run a later line first). A file also
counts as fetched when made from a fetched file (copied, moved, linked, extracted, decompressed,
redirected: fileuse.derivations and the line's redirections), however many steps deep.

Bounded: at most MAX_STAGES stages, MAX_WRITES files written, MAX_RUNS files run by path, MAX_NAMES
programs run by name, MAX_MADE derivations, MAX_COMPARISONS pattern pairs compared and MAX_LINES lines;
past a bound ``complete`` is False (the engine then asks, TK-SHELL-PARSE), and once the comparisons are
spent every further pair counts as the same file.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .escapes import escape_unprintable
from .fetchers import fetch_token, may_write, written_files
from .fileuse import (
    ANY,
    Derivation,
    Run,
    Stage,
    derivations,
    operands,
    run_files,
)

MAX_STAGES = 4096        # commands read, of the line and the command strings it runs
MAX_WRITES = 128         # files written (and made from them) followed
MAX_RUNS = 128           # files run by path
MAX_NAMES = 4096         # programs run by a bare name
MAX_MADE = 8192          # derivations (copies, extractions, redirected reads) followed
MAX_FED = 64             # files read by one pipeline's stages that are followed into what it writes
MAX_COMPARISONS = 100_000  # pattern pairs compared in all
MAX_LINES = 16           # fetch-run lines given
MAX_PATH = 4096          # a longer path is taken as any path
MAX_WRITERS = 32         # programs named in a line's writers field
MAX_TOKEN_CHARS = 32     # of a program's name in the writers field (escaped: at most 320, then "…")
_FIELD_CHARS = 240       # of a path, source or command shown (escaped, a field is at most ten times that)
UNKNOWN_SOURCE = "(unknown source)"

_EXPANSION = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_]\w*|\$[0-9@*#?$!-]")
_GLOB = re.compile(r"\[[^\]/]*\]|[?*]+")
_BUILT_AT_RUN_TIME = ("$(", "<(", ">(", "`")
_URL_IN = re.compile(r"[A-Za-z][\w+.-]{0,31}://[^\s'\"<>()\\]{1,2048}")


@dataclass(frozen=True)
class FetchRuns:
    """The ``fetch-run:`` lines of one command line, and whether every stage and pair could be read."""

    lines: tuple[str, ...]
    complete: bool


_Made = tuple[tuple[str, ...], tuple[str, ...], bool]  # a derivation: source patterns, targets, tree


@dataclass(frozen=True, slots=True)
class _Write:
    patterns: tuple[str, ...]
    names: frozenset[str] | None   # the last path components it may have (None: one has a star)
    writers: tuple[str, ...]
    source: str
    shown: str


def _names(patterns: tuple[str, ...]) -> frozenset[str] | None:
    """The last components of star patterns, or None if any holds a star (then it may be anything)."""
    names = frozenset(p.rsplit("/", 1)[-1] for p in patterns)
    return None if any(ANY in name for name in names) else names


def path_patterns(path: str) -> tuple[str, ...]:
    """The star patterns (``*`` = any text, ``/`` included) of the files ``path`` may name."""
    if not path or len(path) > MAX_PATH or any(mark in path for mark in _BUILT_AT_RUN_TIME):
        return (ANY,)
    if path.startswith("~") or _EXPANSION.search(path):
        # an unknown variable (or ~, a home directory the policy does not resolve) may hold any text, "/" and
        # ".." included: only a last component after it stays known
        slash = path.rfind("/")
        last = path[slash + 1:] if slash >= 0 else ""
        if last in ("", ".", "..") or any(m.end() > slash for m in _EXPANSION.finditer(path)):
            return (ANY,)  # no known last component (or the last slash is inside ${...})
        return (ANY + "/" + re.sub(r"\*+", ANY, _GLOB.sub(ANY, last)),)
    text = re.sub(r"\*+", ANY, _GLOB.sub(ANY, path))  # a glob stays inside one component
    if text.startswith("/"):
        tidy = posixpath.normpath(text)
        return ("/" + tidy.lstrip("/"),)
    tidy = posixpath.normpath(text)
    while tidy.startswith("../"):
        tidy = tidy[3:]
    if tidy in (".", ".."):
        return (ANY,)
    return (tidy, ANY + "/" + tidy)


def _matches(pattern: str, text: str) -> bool:
    """Whether a star pattern matches a text without stars (greedy leftmost search is exact for ``*`` alone)."""
    pieces = pattern.split(ANY)
    first, last = pieces[0], pieces[-1]
    if len(text) < len(first) + len(last) or not text.startswith(first) or not text.endswith(last):
        return False
    position, end = len(first), len(text) - len(last)
    for piece in pieces[1:-1]:
        found = text.find(piece, position, end)
        if found < 0:
            return False
        position = found + len(piece)
    return True


def overlap(a: str, b: str) -> bool:
    """Whether two star patterns can name the same path."""
    a_name, b_name = a.rsplit("/", 1)[-1], b.rsplit("/", 1)[-1]
    if a_name != b_name and ANY not in a_name and ANY not in b_name:
        return False  # a path's last component is the text after its last slash in both
    a_star, b_star = ANY in a, ANY in b
    if not a_star and not b_star:
        return a == b
    if not b_star:
        return _matches(a, b)
    if not a_star:
        return _matches(b, a)
    # both have a star: each star can absorb the other's middle, so only the ends must agree
    a_head, a_tail = a.split(ANY, 1)[0], a.rsplit(ANY, 1)[-1]
    b_head, b_tail = b.split(ANY, 1)[0], b.rsplit(ANY, 1)[-1]
    return (a_head.startswith(b_head) or b_head.startswith(a_head)) and (
        a_tail.endswith(b_tail) or b_tail.endswith(a_tail))


def _quote(text: str) -> str:
    return "'" + escape_unprintable(text, _FIELD_CHARS, also="'\\") + "'"


def _token(name: str) -> str:
    return escape_unprintable(name, MAX_TOKEN_CHARS, also="'\\ |") or "-"


def _source(args: Sequence[str]) -> str:
    for arg in args:
        m = _URL_IN.search(arg)
        if m:
            return m.group()
    return UNKNOWN_SOURCE


class _Analysis:
    def __init__(self) -> None:
        self.complete = True
        self.writes: dict[tuple[str, tuple[str, ...]], _Write] = {}
        self.made: dict[_Made, None] = {}              # (source patterns, targets, tree), in order
        self.made_by_name: dict[str, list[_Made]] = {}  # by a source's last path component
        self.made_by_any: list[_Made] = []              # a source's last component is unknown
        self.runs: dict[str, tuple[tuple[str, ...], str]] = {}   # path run -> (its patterns, the command)
        self.named: dict[str, str] = {}                           # program run by name -> the command
        self.cut = False   # a bound left writes, runs or derivations out (matters only if some pair could form)
        self.budget = MAX_COMPARISONS

    def same(self, these: tuple[str, ...], those: tuple[str, ...]) -> bool:
        """Whether any pattern of ``these`` may name the same path as one of ``those`` (counted against the
        budget; once it is spent the answer is yes, and the analysis is incomplete)."""
        self.budget -= len(these) * len(those)
        if self.budget < 0:
            self.cut = True
            return True
        return any(overlap(a, b) for a in these for b in those)

    def add_write(self, path: str, writers: tuple[str, ...], source: str, shown: str) -> _Write | None:
        """Record a file written; the new record, or None if it was known (or past the bound)."""
        key = (path, writers)
        if key in self.writes:
            return None
        if len(self.writes) >= MAX_WRITES:
            self.cut = True
            return None
        patterns = path_patterns(path)
        write = self.writes[key] = _Write(patterns, _names(patterns), writers, source, shown)
        return write

    def add_made(self, made: Derivation) -> None:
        sources = tuple(dict.fromkeys(p for source in made.sources for p in path_patterns(source)))
        key = (sources, made.targets, made.tree)
        if key in self.made:
            return
        if len(self.made) >= MAX_MADE:
            self.cut = True
            return
        self.made[key] = None
        names = _names(sources)
        if names is None:
            self.made_by_any.append(key)
        else:
            for name in names:
                self.made_by_name.setdefault(name, []).append(key)

    def made_from(self, write: _Write) -> list[_Made]:
        """The derivations whose sources may be ``write``'s file (by the last path component first)."""
        if write.names is None:
            return list(self.made)
        found = dict.fromkeys(key for name in sorted(write.names) for key in self.made_by_name.get(name, ()))
        found.update(dict.fromkeys(self.made_by_any))
        return list(found)

    def add_run(self, run: Run, command: str) -> None:
        table: dict = self.named if run.by_name else self.runs
        if run.path in table:
            return
        if len(table) >= (MAX_NAMES if run.by_name else MAX_RUNS):
            self.cut = True
            return
        table[run.path] = command if run.by_name else (path_patterns(run.path), command)

    def read_pipeline(self, pipeline: Sequence[Stage], everyone: tuple[str, ...], everywhere: str) -> None:
        """Record what one pipeline writes, makes and runs; ``everyone``/``everywhere``: the line's programs and
        first URL, the writers and source of a group's output."""
        writers: dict[str, None] = {}
        source = UNKNOWN_SOURCE
        fed: list[str] = []         # files the stages so far read: their output may hold what those held
        texts: list[str] = []
        earlier_group = False
        for position, stage in enumerate(pipeline):
            if stage.group:
                writers.update(dict.fromkeys(everyone))
            elif stage.argv and len(writers) < MAX_WRITERS:
                writers[fetch_token(stage.argv)] = None
            chain = tuple(writers)[:MAX_WRITERS]
            if source == UNKNOWN_SOURCE:
                source = everywhere if stage.group else _source(stage.argv[1:])
            before = tuple(fed)
            fed.extend((*operands(stage.argv), *stage.reads))
            if len(fed) > MAX_FED:
                fed = [ANY]  # too many to follow: what comes out may hold any of them
            shown = (*stage.wrapper_paths, *((stage.head, *stage.argv[1:]) if stage.argv else ()))
            text = " ".join(shown) if shown else "( … )"
            texts.append(text[:_FIELD_CHARS])
            own = written_files(stage.argv)
            for path in (*stage.writes, *own):
                self.add_write(path, chain, source, path)
            outputs = (*stage.writes, *(own if stage.argv[:1] == ("tee",) else ()))
            if outputs:
                self.add_made(Derivation(tuple(fed), outputs))
            for made in derivations(stage.argv):
                if "-" in made.sources and position > 0:  # extracts what the stages before it piped in
                    for target in made.targets:
                        self.add_write(target, chain, source, f"{target} (what {stage.argv[0]} unpacks)")
                self.add_made(made)
            for run in run_files(stage):
                self.add_run(run, text)
            if stage.runs_stdin or (stage.group and position > 0):
                piped = " | ".join(texts if len(texts) <= 4 else [texts[0], "…", *texts[-2:]])
                for path in (*before, *stage.reads):
                    self.add_run(Run(path), piped)
                if earlier_group:
                    self.add_run(Run(ANY), piped)
            earlier_group = earlier_group or stage.group

    def derive(self) -> None:
        """Files made from written files count as written by the same programs, however many steps deep (each
        step adds a file written, and those are bounded)."""
        pending = list(self.writes.values())
        while pending:
            added = []
            for write in pending:
                for sources, targets, tree in self.made_from(write):
                    if self.budget < 0:
                        return
                    if not self.same(sources, write.patterns):
                        continue
                    if tree:  # the file may have been under a source directory: now under a target, same name
                        name = write.patterns[0].rsplit("/", 1)[-1]
                        targets = (*targets, *(f"{t.rstrip('/')}/{middle}{name}" for t in targets
                                               for middle in ("", "*/")))
                    added += [new for target in targets
                              if (new := self.add_write(target, write.writers, write.source,
                                                        f"{write.shown} -> {target}")) is not None]
            pending = added

    def lines(self) -> list[str]:
        found: dict[str, None] = {}
        writes = sorted(self.writes.values(), key=lambda w: w.source.startswith("("))  # known sources first
        for write in writes:
            names = {p.rsplit("/", 1)[-1] for p in write.patterns}
            commands = [self.named[name] for name in names if ANY not in name and name in self.named]
            commands += [command for patterns, command in self.runs.values() if self.same(write.patterns, patterns)]
            for command in commands:
                line = (f"fetch-run: {'|'.join(_token(w) for w in write.writers) or '-'} fetched "
                        f"{_quote(write.source)} into {_quote(write.shown)}, then ran {_quote(command)}")
                if len(found) >= MAX_LINES and line not in found:
                    self.complete = False
                    return list(found)
                found[line] = None
        return list(found)


def fetch_runs(pipelines: Sequence[Sequence[Stage]]) -> FetchRuns:
    """The ``fetch-run:`` lines of a command line whose pipelines (of Stage facts) are given."""
    analysis = _Analysis()
    kept: list[Sequence[Stage]] = []
    count = 0
    for pipeline in pipelines:
        count += len(pipeline)
        if count > MAX_STAGES:
            analysis.complete = False
            break
        kept.append(pipeline)
    if not any(may_write(stage) for pipeline in kept for stage in pipeline):
        return FetchRuns((), analysis.complete)  # most command lines: nothing is written, nothing to pair
    grouped = any(stage.group for pipeline in kept for stage in pipeline)
    everyone = tuple(dict.fromkeys(fetch_token(s.argv) for p in kept for s in p if s.argv))[:MAX_WRITERS] \
        if grouped else ()
    everywhere = _source([arg for p in kept for s in p for arg in s.argv[1:]]) if grouped else ""
    for pipeline in kept:
        analysis.read_pipeline(pipeline, everyone, everywhere)
    if not analysis.writes or not (analysis.runs or analysis.named):
        return FetchRuns((), analysis.complete)
    analysis.derive()
    lines = tuple(analysis.lines())
    return FetchRuns(lines, analysis.complete and not analysis.cut)

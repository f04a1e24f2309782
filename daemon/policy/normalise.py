"""The shell deobfuscation normaliser: every reading of a command line a rule should see.

Obfuscation (``r''m``, ``$'\\x72\\x6d'``, ``${IFS}``, ``a=rm; $a``, ``$(echo rm)``, ``{rm,-rf,/}``,
``echo cm0gLXJmIC8= | base64 -d | sh``, ``bash -c "..."``, ``/bin/rm``, ``sudo env timeout 5 rm``...)
must not hide what will run, so a shell rule is matched against *readings* and fires if its pattern
matches any one of them. For a command line the readings are, in order (duplicates dropped):

1. the original text, exactly as given;
2. literal: quotes, escapes and continuations removed, ``$IFS`` a blank, comments dropped, blanks
   collapsed (``r''m  -rf\\t/`` -> ``rm -rf /``);
3. resolved: also variables assigned earlier substituted, static ``$(echo …)``/backticks inlined,
   braces expanded, program paths reduced to names, path arguments tidied;
4. stripped: also wrappers removed (``sudo``, ``env``, ``nice``, ``nohup``, ``timeout 5``, ``xargs``,
   ``command``, ``exec``…) and long options spelled short (``--recursive`` -> ``-r``);
5. stripped again with unknown variables in a program name or inside a word taken as empty
   (``r${x}m`` -> ``rm``), only when that differs;
6. the pipeline skeleton: one line per pipeline, ``pipeline: curl | tee | exec-stdin:sh``, where
   ``exec-stdin:`` marks a stage that runs code read from its standard input;
7. the output of a static decoding pipeline that is not run (``echo … | base64 -d``);
8. the readings of every command string the line runs, recursively: ``bash -c``/``sh -c`` strings,
   ``eval`` arguments, ``su -c``/``trap``/``watch`` commands, shell commands inside
   ``python -c``/``perl -e`` code, payloads decoded and piped into a shell, here-documents and
   here-strings fed to a shell, and the command's up-front stdin text when it runs its stdin;
9. download then run: one ``fetch-run:`` line per file that the line (with every command string it
   runs) both writes and runs, naming the programs whose output reached the file (fetchrun.py):
   ``fetch-run: curl fetched 'https://x/i.sh' into '/tmp/i.sh', then ran 'sh /tmp/i.sh'``.

Bounded: recursion depth MAX_DEPTH, at most MAX_READINGS readings, each at most MAX_READING_BYTES
(UTF-8), at most MAX_WORK characters parsed in all. When a bound cuts the work short, ``complete``
is False (the engine then asks rather than allows). Never raises.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .fetchrun import MAX_STAGES, fetch_runs
from .fileuse import Stage
from .render import Renderer
from .shellparse import parse, plain_words

MAX_DEPTH = 8
MAX_READINGS = 64
MAX_READING_BYTES = 1 << 20
MAX_WORK = 4 << 20
_CACHEABLE = 4096  # commands up to this length are cached (typical agent commands repeat)


@dataclass(frozen=True)
class Normalised:
    """What the normaliser made of one command line."""

    readings: tuple[str, ...]
    parse_errors: tuple[str, ...]   # unbalanced quotes etc., in the line or any string it runs
    complete: bool                  # False if a bound (depth, count, size, work) cut the reading short
    reads_stdin: bool               # a first pipeline stage runs code from the process's own stdin


def _utf8_size(text: str) -> int:
    if len(text) * 4 <= MAX_READING_BYTES:
        return len(text)  # cannot be over the limit: skip encoding
    return len(text.encode("utf-8", "surrogatepass"))


def _clip(text: str) -> str:
    """``text`` cut to at most MAX_READING_BYTES of UTF-8."""
    clipped = text.encode("utf-8", "surrogatepass")[:MAX_READING_BYTES]
    return clipped.decode("utf-8", "ignore") if clipped else ""


class _Collector:
    def __init__(self) -> None:
        self.readings: dict[str, None] = {}
        self.errors: list[str] = []
        self.complete = True
        self.work = 0
        self.reads_stdin = False
        self.pipelines: list[tuple[Stage, ...]] = []   # of the line and every command string it runs
        self.stages = 0

    def add(self, text: str) -> None:
        if not text or text in self.readings:
            return
        if len(self.readings) >= MAX_READINGS:
            self.complete = False
            return
        if _utf8_size(text) > MAX_READING_BYTES:
            self.complete = False
            text = _clip(text)
        self.readings[text] = None


def _read(text: str, depth: int, out: _Collector, positional: dict[str, str] | None, stdin: bytes | None) -> None:
    out.add(text)
    if depth > MAX_DEPTH:
        out.complete = False
        return
    out.work += len(text)
    if out.work > MAX_WORK:
        out.complete = False
        return
    renderer = Renderer(positional, stdin)
    words = plain_words(text)
    if words is not None:  # most agent commands: rendered without a tree (render.Renderer.plain)
        literal, resolved, stripped = renderer.plain(words)
        out.add(literal)
    else:
        script = parse(text)
        if script.truncated:
            out.complete = False
            out.errors.extend(script.errors)
            return
        out.errors.extend(script.errors)
        out.add(renderer.literal(script))
        resolved, stripped = renderer.resolved(script)
    out.add(resolved)
    out.add(stripped)
    if renderer.overflow:
        out.complete = False
    out.stages += renderer.stages
    out.pipelines.extend(renderer.pipelines)
    if renderer.could_empty:
        emptied = Renderer(positional, stdin, empty_unknown=True)
        out.add(emptied.resolved(script)[1])
    if depth == 0 and renderer.reads_stdin:
        out.reads_stdin = True
    if renderer.skeleton:
        out.add("\n".join(renderer.skeleton))
    for decoded in renderer.decoded:
        out.add(decoded)
    for nested_text, nested_positional, nested_stdin in renderer.nested:
        if len(out.readings) >= MAX_READINGS or out.work > MAX_WORK:
            out.complete = False
            break
        _read(nested_text, depth + 1, out, nested_positional, nested_stdin)


def _normalise(command: str, stdin_text: str | None) -> Normalised:
    out = _Collector()
    try:
        stdin = stdin_text.encode("utf-8", "surrogatepass") if isinstance(stdin_text, str) else None
        _read(command, 0, out, None, stdin)
        found = fetch_runs(out.pipelines)
        if found.lines:
            out.add("\n".join(found.lines))
        if not found.complete or out.stages > MAX_STAGES:
            out.complete = False
    except (RecursionError, MemoryError, ValueError, TypeError, IndexError, KeyError, OverflowError):
        # A bug or a hostile input we did not foresee: keep what was read and say it is incomplete.
        out.complete = False
    if not out.readings:
        out.readings[_clip(command)] = None
    return Normalised(readings=tuple(out.readings), parse_errors=tuple(dict.fromkeys(out.errors)),
                      complete=out.complete, reads_stdin=out.reads_stdin)


class _Cache:
    """A small LRU of recent results; only results whose readings are small are kept (bounded memory)."""

    def __init__(self, entries: int, result_chars: int) -> None:
        self.entries = entries
        self.result_chars = result_chars
        self.items: OrderedDict[tuple[str, str | None], Normalised] = OrderedDict()

    def get(self, key: tuple[str, str | None]) -> Normalised | None:
        found = self.items.get(key)
        if found is not None:
            self.items.move_to_end(key)
        return found

    def put(self, key: tuple[str, str | None], value: Normalised) -> None:
        if sum(map(len, value.readings)) > self.result_chars:
            return
        self.items[key] = value
        if len(self.items) > self.entries:
            self.items.popitem(last=False)

    def clear(self) -> None:
        self.items.clear()


_CACHE = _Cache(entries=2048, result_chars=64 * 1024)


def normalise(command: str, stdin_text: str | None = None) -> Normalised:
    """Read ``command`` (with its up-front stdin text, if any); short commands are cached."""
    if len(command) > _CACHEABLE or (stdin_text is not None and len(stdin_text) > _CACHEABLE):
        return _normalise(command, stdin_text)
    key = (command, stdin_text)
    found = _CACHE.get(key)
    if found is None:
        found = _normalise(command, stdin_text)
        _CACHE.put(key, found)
    return found


def normalise_command(command: str) -> tuple[str, ...]:
    """The original command plus every deobfuscated reading of it (see the module docstring)."""
    if not isinstance(command, str):
        return ()
    return normalise(command).readings

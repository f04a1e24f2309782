"""Render a parsed shell script as the plain texts that rules are matched against.

Two renderings of one script (see normalise.py for how they become readings):

* ``literal``: quotes and escapes removed, continuations joined, ``$IFS`` as a blank, comments
  dropped, blanks collapsed; variables and substitutions left as ``$name`` / ``$(...)``.
* ``resolved`` (and ``stripped``): additionally variables assigned earlier in the script substituted,
  static ``$(echo ...)``/``$(printf ...)`` inlined, brace expansion done, program paths reduced to
  their names (``/bin/rm`` -> ``rm``), path arguments tidied (``/tmp/..`` -> ``/``); ``stripped``
  also removes wrappers (``sudo``, ``env``, ``timeout 5``, ``xargs``...) and spells long options short.

While rendering it also collects what else must be read: command strings run by a shell (``bash -c``,
``eval``, ``su -c``, interpreter ``system()`` calls), payloads decoded by a static pipeline and piped
into a shell, here-documents fed to a shell, a one-line-per-pipeline skeleton, and every pipeline's
commands as ``Stage`` facts (what fetchrun.py reads to find a download that the line runs).
"""

from __future__ import annotations

import posixpath
import re

from .commands import (
    canonical_options,
    command_string,
    embedded_shell_commands,
    interpreter_call,
    is_assignment,
    program_name,
    shell_call,
    strip_wrappers,
)
from .decoders import DECODERS, MAX_OUTPUT, printf, run_stage
from .fetchers import fetch_token
from .fetchrun import MAX_STAGES
from .fileuse import Stage, redirect_files
from .params import WELL_KNOWN_ENV, expand_param
from .shellast import Command, Lit, Param, Pipeline, Redirect, Script, Subst, Word

MAX_VALUE = 64 * 1024          # longest variable value we keep
MAX_BRACE_WORDS = 64           # most words one brace expansion may produce
MAX_SKELETON_STAGES = 32
MAX_EXPANSION = 2 << 20        # characters of variable and substitution values substituted in one script
_BRACE = re.compile(r"\{([^{}\s]*,[^{}\s]*)\}")
_NOT_TIDY = re.compile(r"://|\$\(|\s")
_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly"})


def _join(words: list[str]) -> str:
    return " ".join(w for w in words if w)


def _tidy_path(arg: str) -> str:
    """Collapse // and /./ and resolve .. in a path-like argument (not URLs, not substitutions)."""
    if "/" not in arg or len(arg) > 4096 or _NOT_TIDY.search(arg):
        return arg
    tidy = posixpath.normpath(arg)
    return "/" + tidy.lstrip("/") if tidy.startswith("//") else tidy


def _format_redirect(fd: str, op: str, target: str) -> str:
    return f"{fd}{op}{'' if op.endswith('&') else ' '}{_tidy_path(target)}".rstrip()


def _brace_expand(text: str) -> list[str]:
    """Simple brace expansion: {a,b,c} (not nested), repeated, at most MAX_BRACE_WORDS words."""
    words = [text]
    for _ in range(8):
        out: list[str] = []
        changed = False
        for word in words:
            m = _BRACE.search(word)
            if m is None:
                out.append(word)
                continue
            changed = True
            out.extend(word[:m.start()] + alt + word[m.end():] for alt in m.group(1).split(","))
        words = out[:MAX_BRACE_WORDS]
        if not changed:
            break
    return words


class Renderer:
    """Renders one script; ``nested``, ``decoded`` and ``skeleton`` hold what it found along the way."""

    def __init__(self, positional: dict[str, str] | None, stdin: bytes | None, *, empty_unknown: bool = False) -> None:
        self.vars: dict[str, str] = {}
        self.declared: set[str] = set()       # set by for/read: value unknown, never emptied
        self.positional = positional
        self.process_stdin = stdin
        self.empty_unknown = empty_unknown
        self.could_empty = False              # an unknown variable that a second pass would empty
        self.nested: list[tuple[str, dict[str, str] | None, bytes | None]] = []
        self.decoded: list[str] = []
        self.skeleton: list[str] = []
        self.pipelines: list[tuple[Stage, ...]] = []   # every pipeline rendered, in order, as Stage facts
        self.stages = 0                                 # stages rendered (past MAX_STAGES none are kept)
        self.reads_stdin = False              # a first stage runs code from the process's own stdin
        self.expanded = 0                     # characters substituted so far (bounded by MAX_EXPANSION)
        self.overflow = False                 # True once MAX_EXPANSION cut expansion short

    # -- literal rendering -------------------------------------------------------------------

    def literal(self, script: Script) -> str:
        return " ".join(self._literal_script(script).split())

    def _literal_script(self, script: Script) -> str:
        out = []
        for pipeline, op in script.items:
            out.append(" | ".join(self._literal_command(c) for c in pipeline.commands))
            out.append({"&&": " && ", "||": " || ", "&": " & "}.get(op, "; "))
        return "".join(out[:-1]) + (" &" if script.items and script.items[-1][1] == "&" else "")

    def _literal_command(self, command: Command) -> str:
        if command.subshell is not None:
            text = "( " + self._literal_script(command.subshell) + " )"
        else:
            text = _join([self._literal_word(w) for w in command.words])
        return _join([text, *(self._literal_redirect(r) for r in command.redirects)])

    def _literal_word(self, word: Word) -> str:
        out = []
        for part in word.parts:
            if isinstance(part, Lit):
                out.append(part.text)
            elif isinstance(part, Param):
                out.append(" " if part.name == "IFS" else self._param_text(part))
            elif isinstance(part, Subst):
                out.append(part.kind + self._literal_script(part.body) + ")")
            else:
                out.append(f"$(({part.text}))")
        return "".join(out)

    def _literal_redirect(self, redirect: Redirect) -> str:
        target = self._literal_word(redirect.target) if redirect.target is not None else ""
        return f"{redirect.fd}{redirect.op}{'' if redirect.op.endswith('&') else ' '}{target}".rstrip()

    @staticmethod
    def _param_text(part: Param) -> str:
        if not part.op:
            return f"${part.name}"
        if part.op.startswith("len"):
            return "${#" + part.name + part.op[3:] + "}"
        if part.op.startswith("!"):
            return "${!" + part.name + part.op[1:] + "}"
        return "${" + part.name + part.op + "}"

    # -- resolved rendering ------------------------------------------------------------------

    def resolved(self, script: Script) -> tuple[str, str]:
        """(resolved, stripped) renderings; updates vars and the collections as it goes."""
        r2, r3 = self._script(script, top=True)
        return " ".join(r2.split()), " ".join(r3.split())

    def _script(self, script: Script, top: bool = False) -> tuple[str, str]:
        out2, out3 = [], []
        for pipeline, op in script.items:
            r2, r3, _output = self._pipeline(pipeline, top)
            if not r3:
                continue  # an assignment-only command leaves nothing to show once stripped
            sep = {"&&": " && ", "||": " || ", "&": " & "}.get(op, "; ")
            out2 += (r2, sep)
            out3 += (r3, sep)
        tail = " &" if script.items and script.items[-1][1] == "&" else ""
        return "".join(out2[:-1]) + tail, "".join(out3[:-1]) + tail

    def _pipeline(self, pipeline: Pipeline, top: bool) -> tuple[str, str, bytes | None]:
        texts2, texts3, tokens = [], [], []
        data: bytes | None = self.process_stdin if top else None
        decoded = False
        last_runs_stdin = False
        stages: list[Stage] = []
        for position, command in enumerate(pipeline.commands):
            if command.subshell is not None:
                saved = dict(self.vars)
                r2, r3 = self._script(command.subshell)
                self.vars = saved
                parts = self._redirect_parts(command.redirects)
                redirects = [_format_redirect(*part) for part in parts]
                texts2.append(_join(["( " + r2 + " )", *redirects]))
                texts3.append(_join(["( " + r3 + " )", *redirects]))
                tokens.append("(...)")
                stages.append(Stage((), "", *redirect_files(parts), runs_stdin=False, group=True))
                data = None
                continue
            argv2, argv3, head, wrapper_paths, parts = self._command(command)
            redirects = [_format_redirect(*part) for part in parts]
            if "xargs" in argv2[:len(argv2) - len(argv3)] and data is not None and len(data) <= 4096:
                argv3 = argv3 + data.decode("utf-8", "replace").split()  # xargs appends its input
            stdin = data
            for redirect in command.redirects:
                if redirect.op in ("<<", "<<-"):
                    stdin = (redirect.heredoc or "").encode("utf-8", "surrogatepass")
                elif redirect.op == "<<<" and redirect.target is not None:
                    stdin = (" ".join(self._fields(redirect.target)) + "\n").encode("utf-8", "surrogatepass")
                elif redirect.op in ("<", "<>", "<&"):
                    stdin = None
            redirected = any(r.op.startswith("<") for r in command.redirects)
            runs_stdin = self._examine(argv3, stdin)
            if runs_stdin and position == 0 and top and not redirected and self.process_stdin is None:
                self.reads_stdin = True
            name = argv3[0] if argv3 else ""
            token = fetch_token(tuple(argv3))[:64] or "-"  # python3:fetch for interpreter code that fetches
            if runs_stdin and position == 0 and top and not redirected and self.process_stdin is None:
                tokens.append("stdin")  # code streamed on the process's own stdin, which no rule can read
            tokens.append(("exec-stdin:" + token) if runs_stdin else token)
            data = run_stage(name, argv3[1:], stdin) if name else None
            decoded = decoded or (data is not None and (name in DECODERS or (name == "echo" and "-e" in argv3)))
            last_runs_stdin = runs_stdin
            stages.append(Stage(tuple(argv3), head, *redirect_files(parts), runs_stdin=runs_stdin, group=not argv3,
                                wrapper_paths=wrapper_paths))
            texts2.append(_join([_join([_tidy_path(a) for a in argv2]), *redirects]))
            texts3.append(_join([_join([_tidy_path(a) for a in argv3]), *redirects]))
        self.stages += len(stages)
        if self.stages <= MAX_STAGES:
            self.pipelines.append(tuple(stages))
        if len(tokens) > 1 or any(t.startswith("exec-stdin:") for t in tokens):
            if len(tokens) > MAX_SKELETON_STAGES:
                tokens = tokens[:16] + ["…"] + tokens[-(MAX_SKELETON_STAGES - 17):]
            self.skeleton.append("pipeline: " + " | ".join(tokens))
        if decoded and data is not None and not last_runs_stdin:
            self.decoded.append(data.decode("utf-8", "replace"))
        return " | ".join(texts2), " | ".join(texts3), data

    def _examine(self, argv: list[str], stdin: bytes | None) -> bool:
        """Queue command strings this command runs; True if it runs code read from its stdin."""
        if not argv:
            return False
        head = argv[0]
        shell = shell_call(argv)
        if shell is not None:
            text, reads_stdin, positional = shell
            if text is not None:
                self.nested.append((text, {str(i): a for i, a in enumerate(positional)}, None))
            if reads_stdin and stdin is not None:
                self.nested.append((stdin.decode("utf-8", "replace"), None, None))
            return reads_stdin
        if head == "eval":
            self.nested.append((" ".join(argv[1:]), self.positional, None))
            return False
        if head in ("source", ".") and argv[1:2] in (["/dev/stdin"], ["-"], ["/proc/self/fd/0"]):
            if stdin is not None:
                self.nested.append((stdin.decode("utf-8", "replace"), None, None))
            return True
        text = command_string(argv)
        if text is not None:
            self.nested.append((text, None, None))
            return False
        interpreter = interpreter_call(argv)
        if interpreter is not None:
            code, reads_stdin = interpreter
            if code is None and reads_stdin and stdin is not None:
                code = stdin.decode("utf-8", "replace")
            for found in embedded_shell_commands(code or ""):
                self.nested.append((found, None, None))
            return reads_stdin
        return False

    def _command(self, command: Command) -> tuple[list[str], list[str], str, tuple[str, ...],
                                                   list[tuple[str, str, str]]]:
        """(resolved argv, stripped argv, the program as written once wrappers are gone, the wrappers written as
        paths, redirections as (fd, operator, target)) of a simple command; tracks assignments."""
        fields: list[str] = []
        assignments: list[tuple[str, str]] = []
        head_seen = False
        for word in command.words:
            first = word.parts[0] if word.parts else None
            if not head_seen and isinstance(first, Lit) and not first.quoted and is_assignment(first.text):
                value = "".join(self._fields(word, split=False))
                name, _, rest = value.partition("=")
                assignments.append((name.rstrip("+").split("[")[0], rest))
                fields.append(value)
                continue
            words = self._fields(word, head=not head_seen)
            head_seen = head_seen or bool(words)
            fields.extend(words)
        return (*self._argv(fields, assignments, head_seen), self._redirect_parts(command.redirects))

    def _argv(self, fields: list[str], assignments: list[tuple[str, str]],
              head_seen: bool) -> tuple[list[str], list[str], str, tuple[str, ...]]:
        """(resolved argv, stripped argv, the program as written, the wrappers written as paths) of a command's
        expanded words, of which the first ``len(assignments)`` are the assignments; the assignments last when
        no program follows."""
        if not head_seen:
            for name, value in assignments:
                self._assign(name, value)
        head = [program_name(fields[len(assignments)])] if len(fields) > len(assignments) else []
        raw = fields[:len(assignments)] + head + fields[len(assignments) + 1:]
        wrappers: list[str] = []
        kept = strip_wrappers(fields, keep_path=True, removed=wrappers)
        argv3 = canonical_options([program_name(kept[0]), *kept[1:]]) if kept else []
        self._declarations(argv3)
        return raw, argv3, kept[0] if kept else "", tuple(word for word in wrappers if "/" in word)

    def plain(self, words: list[str]) -> tuple[str, str, str]:
        """(literal, resolved, stripped) of a line of plain words (shellparse.plain_words: no quoting, expansion,
        operator or redirection), with the same side effects as ``literal`` and ``resolved`` of its parse,
        without walking a tree; a property test holds the two equal."""
        if not words:
            return "", "", ""
        fields: list[str] = []
        assignments: list[tuple[str, str]] = []
        head_seen = False
        for word in words:
            if not head_seen and is_assignment(word):
                name, _, rest = word.partition("=")
                assignments.append((name.rstrip("+").split("[")[0], rest))
                fields.append(word)
            else:
                head_seen = True
                fields.extend(_brace_expand(word) if "{" in word and len(word) <= 4096 else (word,))
        argv2, argv3, head, wrapper_paths = self._argv(fields, assignments, head_seen)
        stdin = self.process_stdin  # a top-level line's only stage reads the process's stdin
        if stdin is not None and len(stdin) <= 4096 and "xargs" in argv2[:len(argv2) - len(argv3)]:
            argv3 = argv3 + stdin.decode("utf-8", "replace").split()  # xargs appends its input
        runs_stdin = self._examine(argv3, stdin)
        tokens = []
        if runs_stdin and stdin is None:
            self.reads_stdin = True
            tokens.append("stdin")
        name = argv3[0] if argv3 else ""
        token = fetch_token(tuple(argv3))[:64] or "-"
        tokens.append(("exec-stdin:" + token) if runs_stdin else token)
        data = run_stage(name, argv3[1:], stdin) if name else None
        self.stages += 1
        if self.stages <= MAX_STAGES:
            self.pipelines.append((Stage(tuple(argv3), head, *redirect_files([]), runs_stdin=runs_stdin,
                                         group=not argv3, wrapper_paths=wrapper_paths),))
        if len(tokens) > 1 or tokens[0].startswith("exec-stdin:"):
            self.skeleton.append("pipeline: " + " | ".join(tokens))
        if data is not None and (name in DECODERS or (name == "echo" and "-e" in argv3)) and not runs_stdin:
            self.decoded.append(data.decode("utf-8", "replace"))
        stripped = " ".join(tidy for tidy in map(_tidy_path, argv3) if tidy)
        if not stripped:
            return " ".join(" ".join(words).split()), "", ""
        resolved = " ".join(tidy for tidy in map(_tidy_path, argv2) if tidy)
        return " ".join(" ".join(words).split()), " ".join(resolved.split()), " ".join(stripped.split())

    def _declarations(self, argv: list[str]) -> None:
        if not argv:
            return
        head = argv[0]
        if head in _DECLARERS:
            for arg in argv[1:]:
                if is_assignment(arg):
                    name, _, value = arg.partition("=")
                    self._assign(name.rstrip("+"), value)
                elif not arg.startswith("-"):
                    self.declared.add(arg)
        elif head == "for" or (head in ("read", "select", "mapfile", "readarray")):
            self.declared.update(a for a in argv[1:] if re.fullmatch(r"[A-Za-z_]\w*", a))
        elif head == "printf" and argv[1:2] == ["-v"] and len(argv) >= 4:
            value = printf(argv[3:])
            if value is not None:
                self._assign(argv[2], value)
        elif head == "unset":
            for name in argv[1:]:
                self.vars.pop(name, None)

    def _assign(self, name: str, value: str) -> None:
        self.vars[name] = value[:MAX_VALUE]
        self.declared.discard(name)

    def _redirect_parts(self, redirects: list[Redirect]) -> list[tuple[str, str, str]]:
        """Each redirection as (fd, operator, expanded target; "" for a here-document)."""
        return [(r.fd, r.op, " ".join(self._fields(r.target)) if r.target is not None else "") for r in redirects]

    def _fields(self, word: Word, *, split: bool = True, head: bool = False) -> list[str]:
        """A word's fields after expansion: unquoted expansions split on blanks, braces expanded."""
        fields: list[list[str]] = [[]]
        quoted = False
        brace = False
        parts = word.parts
        for index, part in enumerate(parts):
            if isinstance(part, Lit):
                fields[-1].append(part.text)
                quoted = quoted or part.quoted
                brace = brace or (not part.quoted and "{" in part.text)
                continue
            if isinstance(part, Param):
                value = self._param(part)
                if value is None:
                    sandwiched = 0 < index < len(parts) - 1 and isinstance(parts[index - 1], Lit) and isinstance(
                        parts[index + 1], Lit)
                    if (head or sandwiched) and part.name not in self.declared and not WELL_KNOWN_ENV.fullmatch(
                            part.name):
                        self.could_empty = True
                        value = "" if self.empty_unknown else None
                if value is None:
                    fields[-1].append(self._param_text(part))
                    continue
                quoted = quoted or part.quoted
            elif isinstance(part, Subst):
                value, text = self._substitution(part)
                if value is None:
                    fields[-1].append(text)
                    continue
            else:
                fields[-1].append(f"$(({part.text}))")
                continue
            self.expanded += len(value)
            if self.expanded > MAX_EXPANSION:
                self.overflow = True
                fields[-1].append(self._param_text(part) if isinstance(part, Param) else "$(...)")
                continue
            if part.quoted or not split:
                fields[-1].append(value)
            elif value:
                pieces = value.split()
                if value[0].isspace() and fields[-1]:
                    fields.append([])
                for k, piece in enumerate(pieces):
                    if k:
                        fields.append([])
                    fields[-1].append(piece)
                if value[-1].isspace() and pieces:
                    fields.append([])
        out = ["".join(f) for f in fields]
        out = [f for f in out if f] or ([""] if quoted else [])
        if brace and split and len(out) == 1 and len(out[0]) <= 4096:
            out = [w for f in out for w in _brace_expand(f)]
        return out

    def _substitution(self, part: Subst) -> tuple[str | None, str]:
        """(output if the substitution is static: echo, printf, decoders; else None, its stripped text)."""
        saved = dict(self.vars)
        texts, output = [], None
        for pipeline, _op in part.body.items:
            _r2, r3, output = self._pipeline(pipeline, top=False)
            texts.append(r3)
        self.vars = saved  # a substitution runs in a subshell: its assignments do not last
        text = part.kind + "; ".join(texts) + ")"
        if part.kind != "$(":
            return None, text
        if not part.body.items:
            return "", text
        if output is None:
            return None, text
        return output[:MAX_OUTPUT].decode("utf-8", "replace").rstrip("\n"), text

    def _param(self, part: Param) -> str | None:
        return expand_param(part, self.vars, self.positional)

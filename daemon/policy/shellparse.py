"""Parse a shell command line into a small syntax tree: what the normaliser reads.

Covers what changes which program runs with which words: quoting ('...', "...", $'...', $"..."),
backslash escapes and line continuations, parameter expansion ($x, ${x...}), command substitution
($(...) and backticks), process substitution (<(...), >(...)), arithmetic (kept as text), pipelines,
and-or lists, lists, subshells, redirections, here-documents, here-strings and comments. It is not a
full shell grammar: if/for/while/case/function bodies are read as sequences of simple commands whose
leading reserved words the normaliser skips.

Lenient and bounded: an unterminated construct is closed at the end of the input and recorded in
``Script.errors`` so the caller can still read what is there; nesting deeper than MAX_NESTING or more
than MAX_TOKENS tokens stops the parse (``Script.truncated``). It never raises.
"""

from __future__ import annotations

import re

from .escapes import decode_ansi_c
from .shellast import Arith, Command, Lit, Param, Part, Pipeline, Redirect, Script, Subst, Word

MAX_NESTING = 40
MAX_TOKENS = 100_000


class _Stop(Exception):
    """Nesting or token budget exceeded: abandon the parse."""


_PLAIN = re.compile(r"[^\s'\"\\$`;&|<>()]+")
_DQ_PLAIN = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED = re.compile(r"(!|#(?=[A-Za-z_0-9@*#?$!-]))?([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(.*)", re.S)
_BLANKS = re.compile(r"[ \t]+")
_REDIRECT_OPS = ("<<<", "<<-", "<<", "<>", "<&", "<", "&>>", "&>", ">>", ">&", ">|", ">")
_WORD_BREAK = frozenset(" \t\n;&|<>()")


class _Parser:
    def __init__(self, text: str, state: _State) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.state = state

    # -- scripts -------------------------------------------------------------------------------

    def script(self, stop: str | None) -> Script:
        """Parse until end of input, or (if stop == ")") the matching close paren."""
        state = self.state
        state.depth += 1
        if state.depth > MAX_NESTING:
            raise _Stop
        script = Script()
        pipeline: list[Command] = []
        command = Command()
        s, n = self.s, self.n

        def end_command() -> None:
            nonlocal command
            if command.words or command.redirects or command.subshell is not None:
                pipeline.append(command)
            command = Command()

        def end_pipeline(op: str) -> None:
            nonlocal pipeline
            end_command()
            if pipeline:
                script.items.append((Pipeline(pipeline), op))
            pipeline = []

        while self.i < n:
            state.spend_token()
            i = self.i
            c = s[i]
            if c == " " or c == "\t":
                self.i = _BLANKS.match(s, i).end()
            elif c == "\\" and s.startswith("\\\n", i):
                self.i = i + 2
            elif c == "\n":
                end_pipeline("\n")
                self.i = i + 1
                self.read_heredocs()
            elif c == "#":
                j = s.find("\n", i)
                self.i = n if j < 0 else j
            elif c == ")":
                self.i = i + 1
                if stop == ")":
                    end_pipeline("")
                    state.depth -= 1
                    return script
                end_pipeline(";")  # a case pattern's ")" or a stray one: read on as a new command
            elif c == "(":
                if command.words and s.startswith(")", _skip_blanks(s, i + 1)):
                    # f() { ...; }: a function definition; its body follows as commands
                    self.i = _skip_blanks(s, i + 1) + 1
                    end_command()
                    end_pipeline(";")
                    continue
                end_command()
                self.i = i + 1
                command.subshell = self.script(")")
            elif c == ";":
                self.i = i + (3 if s.startswith(";;&", i) else 2 if s.startswith((";;", ";&"), i) else 1)
                end_pipeline(";")
            elif c == "&":
                if s.startswith("&&", i):
                    self.i = i + 2
                    end_pipeline("&&")
                elif s.startswith("&>", i):
                    self.redirect(command, "")
                else:
                    self.i = i + 1
                    end_pipeline("&")
            elif c == "|":
                if s.startswith("||", i):
                    self.i = i + 2
                    end_pipeline("||")
                else:
                    self.i = i + (2 if s.startswith("|&", i) else 1)
                    end_command()
            elif c in "<>":
                if s.startswith(("<(", ">("), i):
                    command.words.append(self.word())
                else:
                    self.redirect(command, "")
            else:
                word = self.word()
                if (len(word.parts) == 1 and isinstance(word.parts[0], Lit) and not word.parts[0].quoted
                        and word.parts[0].text.isdigit() and self.i < n and s[self.i] in "<>"
                        and not s.startswith(("<(", ">("), self.i)):
                    self.redirect(command, word.parts[0].text)
                else:
                    command.words.append(word)
        end_pipeline("")
        if stop == ")":
            state.errors.append("unterminated ( or $(")
        state.depth -= 1
        return script

    def redirect(self, command: Command, fd: str) -> None:
        s = self.s
        op = next(o for o in _REDIRECT_OPS if s.startswith(o, self.i))
        self.i = _skip_blanks(s, self.i + len(op))
        if self.i >= self.n or s[self.i] in "\n;&|()" or (s[self.i] in "<>" and not s.startswith(("<(", ">("), self.i)):
            self.state.errors.append(f"{op} without a target")
            command.redirects.append(Redirect(op, fd, None))
            return
        target = self.word()
        if op in ("<<", "<<-"):
            delimiter = "".join(p.text if isinstance(p, Lit) else "" for p in target.parts)
            quoted = any(isinstance(p, Lit) and p.quoted for p in target.parts)
            redirect = Redirect(op, fd, None, heredoc="", heredoc_quoted=quoted)
            self.state.pending.append((redirect, delimiter, op == "<<-"))
        else:
            redirect = Redirect(op, fd, target)
        command.redirects.append(redirect)

    def read_heredocs(self) -> None:
        """After a newline: the bodies of the here-documents started on the line just ended."""
        s = self.s
        while self.state.pending:
            redirect, delimiter, strip_tabs = self.state.pending.pop(0)
            lines = []
            while self.i < self.n:
                j = s.find("\n", self.i)
                line = s[self.i:] if j < 0 else s[self.i:j]
                self.i = self.n if j < 0 else j + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                lines.append(line.lstrip("\t") if strip_tabs else line)
            redirect.heredoc = "\n".join(lines) + ("\n" if lines else "")

    # -- words ---------------------------------------------------------------------------------

    def word(self) -> Word:
        s, n = self.s, self.n
        parts: list[Part] = []
        state = self.state
        while self.i < n:
            state.spend_token()
            i = self.i
            c = s[i]
            if c in _WORD_BREAK:
                if c in "<>" and s.startswith(("<(", ">("), i) and not parts:
                    self.i = i + 2
                    parts.append(Subst(self.script(")"), c + "(", False))
                    continue
                break
            m = _PLAIN.match(s, i)
            if m:
                parts.append(Lit(m.group(), False))
                self.i = m.end()
            elif c == "'":
                j = s.find("'", i + 1)
                if j < 0:
                    self.state.errors.append("unterminated single quote")
                    j = n
                parts.append(Lit(s[i + 1:j], True))
                self.i = j + 1
            elif c == '"':
                self.i = i + 1
                self.double_quoted(parts)
            elif c == "\\":
                if s.startswith("\\\n", i):
                    self.i = i + 2
                else:
                    if i + 1 < n:
                        parts.append(Lit(s[i + 1], True))
                    self.i = i + 2
            elif c == "$":
                self.dollar(parts, quoted=False)
            elif c == "`":
                self.backtick(parts, quoted=False)
            else:  # pragma: no cover - every other character is in _PLAIN
                parts.append(Lit(c, False))
                self.i = i + 1
        return Word(parts)

    def double_quoted(self, parts: list[Part]) -> None:
        s, n = self.s, self.n
        state = self.state
        while self.i < n:
            state.spend_token()
            i = self.i
            c = s[i]
            if c == '"':
                self.i = i + 1
                return
            m = _DQ_PLAIN.match(s, i)
            if m:
                parts.append(Lit(m.group(), True))
                self.i = m.end()
            elif c == "\\":
                nxt = s[i + 1] if i + 1 < n else ""
                if nxt == "\n":
                    pass
                elif nxt in ('"', "\\", "$", "`"):
                    parts.append(Lit(nxt, True))
                else:
                    parts.append(Lit("\\" + nxt, True))
                self.i = i + 2
            elif c == "$":
                self.dollar(parts, quoted=True)
            else:  # backtick
                self.backtick(parts, quoted=True)
        self.state.errors.append("unterminated double quote")

    def dollar(self, parts: list[Part], quoted: bool) -> None:
        s, n, i = self.s, self.n, self.i
        nxt = s[i + 1] if i + 1 < n else ""
        if nxt == "'" and not quoted:
            j = i + 2
            while j < n and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            if j >= n:
                self.state.errors.append("unterminated $'...'")
            parts.append(Lit(decode_ansi_c(s[i + 2:min(j, n)]), True))
            self.i = j + 1
        elif nxt == '"' and not quoted:
            self.i = i + 2
            self.double_quoted(parts)
        elif s.startswith("$((", i):
            j = _matching_close(s, i + 3, 2)
            if j < 0:
                self.state.errors.append("unterminated $((")
                j = n
            parts.append(Arith(s[i + 3:j], quoted))
            self.i = min(j + 2, n)
        elif nxt == "(":
            self.i = i + 2
            parts.append(Subst(self.script(")"), "$(", quoted))
        elif nxt == "{":
            j = _matching_close(s, i + 2, 1, open_char="{", close_char="}")
            if j < 0:
                self.state.errors.append("unterminated ${")
                j = n
            body = s[i + 2:j]
            self.i = min(j + 1, n)
            m = _BRACED.fullmatch(body)
            if m is None:
                parts.append(Param("", body, quoted))  # ${} or something odd: never resolvable
            else:
                prefix, name, op = m.group(1) or "", m.group(2), m.group(3)
                parts.append(Param(name, ("len" + op) if prefix == "#" else (("!" + op) if prefix else op), quoted))
        else:
            m = _NAME.match(s, i + 1)
            if m:
                parts.append(Param(m.group(), "", quoted))
                self.i = m.end()
            elif nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
                parts.append(Param(nxt, "", quoted))
                self.i = i + 2
            else:
                parts.append(Lit("$", quoted))
                self.i = i + 1

    def backtick(self, parts: list[Part], quoted: bool) -> None:
        s, n = self.s, self.n
        j = self.i + 1
        body = []
        while j < n and s[j] != "`":
            if s[j] == "\\" and j + 1 < n and s[j + 1] in "$`\\":
                body.append(s[j + 1])
                j += 2
            else:
                body.append(s[j])
                j += 1
        if j >= n:
            self.state.errors.append("unterminated backtick")
        self.i = j + 1
        inner = _Parser("".join(body), self.state)
        parts.append(Subst(inner.script(None), "$(", quoted))


class _State:
    """What is shared by every nested parser of one input."""

    def __init__(self) -> None:
        self.depth = 0
        self.tokens = 0
        self.errors: list[str] = []
        self.pending: list[tuple[Redirect, str, bool]] = []

    def spend_token(self) -> None:
        """Count one token against the input's budget; past it the parse stops."""
        self.tokens += 1
        if self.tokens > MAX_TOKENS:
            raise _Stop


def _skip_blanks(s: str, i: int) -> int:
    m = _BLANKS.match(s, i)
    return m.end() if m else i


def _matching_close(s: str, start: int, width: int, open_char: str = "(", close_char: str = ")") -> int:
    """Index of the close that balances an already-open construct, skipping quoted text; -1 if none."""
    depth = 1
    i, n = start, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and open_char == "{":
            j = s.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == open_char:
            depth += 1
        elif c == close_char:
            depth -= 1
            if depth == 0:
                if width == 2 and not s.startswith(close_char * 2, i):
                    depth = 1
                else:
                    return i
        i += 1
    return -1


# A line of plain words separated by blanks (no quoting, expansion, operator, comment or other
# whitespace), short enough that the token budget cannot run out: most agent commands. Its tree
# is one command of one-literal words, built without the general parser; a property test holds
# the two parses equal.
_SIMPLE_WORD = re.compile(r"[^\s'\"\\$`;&|<>()#][^\s'\"\\$`;&|<>()]*")
_SIMPLE_LINE = re.compile(rf"[ \t]*(?:{_SIMPLE_WORD.pattern}(?:[ \t]+{_SIMPLE_WORD.pattern})*)?[ \t]*")
_SIMPLE_MAX = 4096


def plain_words(text: str) -> list[str] | None:
    """The words of a line of plain words (see above); None for any other line."""
    if len(text) > _SIMPLE_MAX or _SIMPLE_LINE.fullmatch(text) is None:
        return None
    return _SIMPLE_WORD.findall(text)


def _parse_simple(text: str) -> Script | None:
    texts = plain_words(text)
    if texts is None:
        return None
    words = [Word([Lit(word, False)]) for word in texts]
    return Script(items=[(Pipeline([Command(words=words)]), "")] if words else [])


def parse(text: str) -> Script:
    """Parse ``text``; never raises. Check ``errors`` (unbalanced quotes etc.) and ``truncated``."""
    simple = _parse_simple(text)
    return simple if simple is not None else _parse_general(text)


def _parse_general(text: str) -> Script:
    state = _State()
    parser = _Parser(text, state)
    try:
        script = parser.script(None)
        if state.pending:
            state.pending.clear()  # a here-document with no body line: bash reads it as empty
    except (_Stop, RecursionError):
        return Script(errors=["too deeply nested or too long to read"], truncated=True)
    script.errors = state.errors
    return script

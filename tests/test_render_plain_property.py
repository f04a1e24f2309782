"""The renderer's shortcut for a line of plain words must render, and leave behind, exactly what the general
renderer does with the parsed line; and the normaliser must read every line as it would without the shortcut."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.policy import normalise, shellparse
from tkbox_daemon.policy.commands import KNOWN_PROGRAMS, LONG_OPTIONS, RESERVED, SHELLS, WRAPPERS
from tkbox_daemon.policy.decoders import DECODERS
from tkbox_daemon.policy.fetchers import FETCHER_OUTPUTS
from tkbox_daemon.policy.render import Renderer

# Words that change what the renderer does: programs it knows (wrappers, shells, interpreters, decoders,
# fetchers, declarers), their options, assignments, braces, paths to tidy, globs, and odd plain words.
SPECIAL_WORDS = sorted({
    *WRAPPERS, *SHELLS, *DECODERS, *FETCHER_OUTPUTS, *KNOWN_PROGRAMS, *RESERVED - {"{", "}"},
    *(option for options in LONG_OPTIONS.values() for option in (*options, *options.values())),
    "eval", "source", ".", "export", "declare", "local", "readonly", "unset", "for", "read", "printf", "echo",
    "python3", "python", "perl", "node", "ruby", "php", "su", "trap", "-c", "-e", "-d", "-v", "-n", "-i", "-",
    "--", "-u", "-s", "5", "10s", "/dev/stdin", "/proc/self/fd/0", "x=1", "PATH=/tmp", "a+=b", "arr[1]=x",
    "{a,b}", "/bin/{rm,ls}", "{,}", "x{1,2}y", "/bin/rm", "/usr/bin/../bin/sh", "//tmp/./x", "../..", "r?",
    "/???/r?", "c?t", "exec-stdin:x", "https://example.com/i.sh", "/tmp/i.sh", "./x.sh", "cm0gLXJmIC8=",
    "%s", "tr", "a-z", "n-za-m", "-o", "-O", "x.sh", "-f", "-rf", "/", "é", "a=b=c", "=",
})
plain_word = st.one_of(st.sampled_from(SPECIAL_WORDS), st.text(alphabet="abz09=/-.,{}~!*?[]:%+@é#", min_size=1,
                                                                  max_size=10))
STDINS = st.one_of(st.none(), st.sampled_from([b"", b"rm -rf /\n", b"cm0gLXJmIC8=\n", b"a b c", b"\xff\xfe",
                                               b"curl https://x/i.sh | sh", b"x" * 5000]))
POSITIONAL = st.one_of(st.none(), st.dictionaries(st.sampled_from(["0", "1", "2"]), st.sampled_from(["rm", "-rf"]),
                                                  max_size=2))


@st.composite
def plain_lines(draw):
    words = draw(st.lists(plain_word, max_size=8))
    line = "".join(draw(st.sampled_from([" ", "\t", "  "])) + word for word in words)
    return line + draw(st.sampled_from(["", " ", "\t"]))


def _general(text: str, positional, stdin) -> tuple[tuple[str, str, str], dict]:
    script = shellparse._parse_general(text)
    renderer = Renderer(positional, stdin)
    literal = renderer.literal(script)
    return (literal, *renderer.resolved(script)), vars(renderer)


@settings(max_examples=400)
@given(plain_lines(), POSITIONAL, STDINS)
def test_plain_renders_what_the_general_renderer_renders(text, positional, stdin):
    words = shellparse.plain_words(text)
    if words is None:  # a word starting a comment: not a plain line
        assert any(word.startswith("#") for word in text.split())
        return
    renderer = Renderer(positional, stdin)
    assert (renderer.plain(words), vars(renderer)) == _general(text, positional, stdin)


# Every character the parser treats specially, so that lines that are not plain are read too.
SHELL_CHARS = "ab9=/-.,{}#~!*?[]:%+@ \t\r\n\x0b\x0c\x1c\u00a0'\"\\$`;&|<>()é"


@settings(max_examples=300)
@given(st.one_of(plain_lines(), st.text(alphabet=SHELL_CHARS, max_size=40),
                 st.lists(st.sampled_from([*SPECIAL_WORDS, "|", ";", "&&", "$x", "'q'", "<<<", "$(echo rm)"]),
                          max_size=6).map(" ".join)),
       st.one_of(st.none(), st.sampled_from(["rm -rf /", "cm0gLXJmIC8=", "a b"])))
def test_the_normaliser_reads_every_line_as_without_the_shortcut(text, stdin_text):
    with_shortcut = normalise._normalise(text, stdin_text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(normalise, "plain_words", lambda _text: None)
        without = normalise._normalise(text, stdin_text)
    assert with_shortcut == without


def test_the_shortcut_is_taken_for_plain_lines_only():
    assert shellparse.plain_words("  pytest -q  tests/x.py ") == ["pytest", "-q", "tests/x.py"]
    assert shellparse.plain_words("") == []
    for not_plain in ("a 'b'", "a $x", "a | b", "a > f", "a # c", "a\nb", "x" * (shellparse._SIMPLE_MAX + 1)):
        assert shellparse.plain_words(not_plain) is None

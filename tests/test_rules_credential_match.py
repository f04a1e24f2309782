"""The compiled credential-file matcher says what matching each pattern with ``fnmatch``, one by one, says."""

from __future__ import annotations

import fnmatch

from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.rules import CREDENTIAL_FILE_PATTERNS, is_credential_file


def _pattern_by_pattern(relative_path: str) -> bool:
    """The rule as ``docs`` state it, matched the slow way (the reference)."""
    parts = relative_path.casefold().split("/")
    for pattern in CREDENTIAL_FILE_PATTERNS:
        depth = pattern.count("/") + 1
        for start in range(len(parts) - depth + 1):
            if fnmatch.fnmatchcase("/".join(parts[start:start + depth]), pattern):
                return True
    return False


_PIECES = st.sampled_from([".env", "env", ".ENV.local", "x.env", "id_", "id_rsa.pub", ".ssh", ".SSH", "config",
                           ".docker", ".config", "gcloud", "gh", "credentials", "credentials.toml", ".cargo", "a.pem",
                           "key", "b.KEY", "service-account-1.json", "src", "main.py", "[x]", "*", "?", "é", "\n"])
_COMPONENTS = st.one_of(_PIECES, st.text(min_size=1, max_size=12).filter(lambda text: "/" not in text),
                        st.builds(lambda a, b: a + b, _PIECES, _PIECES))


@given(st.lists(_COMPONENTS, min_size=1, max_size=6).map("/".join))
def test_the_compiled_matcher_agrees_with_fnmatch_pattern_by_pattern(relative_path):
    assert is_credential_file(relative_path) == _pattern_by_pattern(relative_path)


def test_every_pattern_matches_its_own_examples_in_any_case():
    for pattern in CREDENTIAL_FILE_PATTERNS:
        example = pattern.replace("*", "x")
        assert is_credential_file(example) and is_credential_file(example.upper()) and is_credential_file(
            "deep/in/" + example), pattern

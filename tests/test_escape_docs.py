"""The escape attempts table (``e2e/escape_attempts.py``) is what docs/box-isolation.md shows, and it is whole:
every attempt the boxes run has a probe, ids are unique, and each says what counts as stopped."""

from __future__ import annotations

from e2e import escape_attempts, escape_probe
from e2e.escape_attempts import ATTEMPTS, RUNNERS


def test_the_docs_show_the_attempts_the_suite_runs():
    text = escape_attempts.DOC_PATH.read_text(encoding="utf-8")
    assert escape_attempts.BEGIN in text and escape_attempts.END in text, "add the escapes markers to the docs"
    assert escape_attempts.documented_section(text) == escape_attempts.markdown_section(), \
        "regenerate with: python -m e2e.escape_attempts"


def test_every_attempt_run_in_a_box_has_a_probe_and_every_probe_an_attempt():
    batched = {attempt.id for attempt in ATTEMPTS if attempt.runner != "host"}
    assert batched == set(escape_probe.PROBES)


def test_attempts_are_unique_named_placed_and_say_what_counts_as_stopped():
    ids = [attempt.id for attempt in ATTEMPTS]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 40  # the floor; the suite grows with every door
    for attempt in ATTEMPTS:
        assert attempt.runner in RUNNERS, attempt
        assert attempt.expect and all(token and "|" not in token for token in attempt.expect), attempt
        assert attempt.tries and "|" not in attempt.tries + attempt.note, attempt  # one table cell each


def test_the_generator_replaces_only_its_own_section():
    text = f"# Title\n\nbefore\n{escape_attempts.BEGIN}stale\n{escape_attempts.END}\nafter\n"
    rendered = escape_attempts.render_into(text)
    assert rendered.startswith("# Title\n\nbefore\n" + escape_attempts.BEGIN)
    assert rendered.endswith(escape_attempts.END + "\nafter\n")
    assert escape_attempts.documented_section(rendered) == escape_attempts.markdown_section()

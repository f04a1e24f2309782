"""The network view's model and text without a terminal: ``NetworkState`` over ``egress.*`` events (counts, bytes,
last outcome and reason, latest urls, the bound), the url reader (Hypothesis: exact, or nothing), the entry an allow
or a block sends, and what the allow confirm says."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.console_fakes import make_event
from tkbox_daemon.wire_egress import ADDRESS_REFUSED_RULE, AllowlistChangeInfo, AllowlistInfo
from tkbox_tui.console.network_state import (
    HOSTS_KEPT,
    RECENT_KEPT,
    TEXT_KEPT,
    HostKey,
    NetworkState,
    split_target,
    split_url,
)
from tkbox_tui.console.network_text import (
    allow_confirm_text,
    allow_entry,
    block_entry,
    detail_lines,
    entry_meaning,
    host_cells,
    recent_lines,
    title_text,
)

GITHUB = "https://api.github.com:443"
PYPI = "http://pypi.example.org:80/simple/requests/?page=2"


def feed(state: NetworkState, *events: tuple[str, dict[str, object]], box_id: str = "b1", start: int = 1) -> None:
    for seq, (kind, data) in enumerate(events, start):
        state.apply(make_event(seq, box_id, kind, **data))


def test_one_row_per_box_scheme_host_and_port_with_its_counts_and_bytes():
    state = NetworkState()
    feed(state,
         ("egress.allowed", {"url": GITHUB, "address": "140.82.112.5"}),
         ("egress.closed", {"url": GITHUB, "up": 1200, "down": 53_000}),
         ("egress.allowed", {"url": GITHUB, "address": "140.82.112.6"}),
         ("egress.closed", {"url": GITHUB, "up": 800, "down": 7_000, "error": "reset by peer"}),
         ("egress.allowed", {"url": "http://api.github.com:80/x", "address": "140.82.112.5"}))
    github, plain = state.rows("b1")
    assert github.key == HostKey("b1", "https", "api.github.com", 443)
    assert (github.allowed, github.held, github.refused, github.up, github.down, github.closed) == (2, 0, 0, 2000,
                                                                                                  60_000, 2)
    assert github.address == "140.82.112.6" and github.last_reason == "closed: reset by peer"
    assert plain.key == HostKey("b1", "http", "api.github.com", 80) and plain.allowed == 1


def test_a_held_connection_counts_as_held_and_as_what_came_of_it():
    state = NetworkState()
    feed(state,
         ("egress.held", {"url": PYPI, "approval_id": "apr-1"}),
         ("egress.held", {"url": PYPI, "approval_id": "apr-2"}))
    row = state.rows()[0]
    assert row.held == 2 and list(row.waiting) == ["apr-1", "apr-2"] and row.last_outcome == "held"
    feed(state,
         ("egress.rejected", {"url": PYPI, "approval_id": "apr-1", "state": "rejected"}),
         ("egress.refused", {"rule": "egress-not-approved", "reason": "pypi.example.org:80 was not approved",
                             "hint": "allow it with: tkbox allow BOX pypi.example.org", "target": "pypi.example.org:80",
                             "url": PYPI}),
         ("egress.approved", {"url": PYPI, "approval_id": "apr-2", "state": "approved"}),
         ("egress.allowed", {"url": PYPI, "address": "192.0.2.7"}), start=3)
    assert (row.held, row.refused, row.allowed) == (2, 1, 1) and row.waiting == {}
    assert [seen.outcome for seen in row.recent] == ["held", "held", "rejected", "refused", "approved", "allowed"]
    assert all(seen.url == PYPI for seen in row.recent)  # the full url where the proxy reads the request


def test_the_last_reason_is_the_refusals_with_its_rule_and_hint_and_the_resolvers_word():
    state = NetworkState()
    feed(state,
         ("egress.resolve_failed", {"host": "gone.example.com", "reason": "Name or service not known"}),
         ("egress.refused", {"rule": "egress-no-address", "reason": "gone.example.com has no address",
                             "hint": "check the name", "target": "gone.example.com:443",
                             "url": "https://gone.example.com:443"}))
    row = state.rows()[0]
    assert row.last_reason == ("gone.example.com has no address (egress-no-address); the resolver said: Name or "
                               "service not known")
    assert row.last_hint == "check the name" and row.refused == 1


def test_a_host_refused_for_its_address_offers_no_allow_until_something_else_happens_to_it():
    state = NetworkState()
    feed(state, ("egress.refused", {"rule": ADDRESS_REFUSED_RULE, "url": "http://10.0.0.1:80/",
                                    "reason": "10.0.0.1 is in 10.0.0.0/8: private-use (RFC 1918): boxes never reach it",
                                    "hint": "nothing to allow: the proxy refuses these addresses whatever the "
                                            "allowlist says"}))
    row = state.rows()[0]
    keys = dict(detail_lines(row, "web", state.box("b1")))["keys"]
    assert keys == ("a: nothing to allow (the proxy refuses this address whatever the list says); b blocks 10.0.0.1 "
                    "on every port")
    feed(state, ("egress.refused", {"rule": "egress-denied", "url": "http://10.0.0.1:80/", "reason": "policy"}),
         start=2)
    keys = dict(detail_lines(state.rows()[0], "web", state.box("b1")))["keys"]
    assert keys.startswith("a allows 10.0.0.1 (HTTPS on port 443 and plain HTTP on port 80)")


def test_a_refusal_naming_only_host_and_port_has_its_own_row_and_one_naming_nothing_is_counted_per_box():
    state = NetworkState()
    feed(state,
         ("egress.refused", {"rule": "egress-connect-80", "reason": "CONNECT to port 80 is refused",
                             "target": "deb.debian.org:80"}),
         ("egress.refused", {"rule": "egress-bad-request", "reason": "not a request the proxy reads"}),
         ("egress.allowed", {"url": "ftp://x.example:21", "address": "192.0.2.1"}))
    (row,) = state.rows()
    assert row.key == HostKey("b1", "", "deb.debian.org", 80) and row.refused == 1
    box = state.box("b1")
    assert box.unnamed_refusals == 1 and box.last_unnamed_reason == "not a request the proxy reads"
    assert box.unreadable == 1


def test_rows_are_listed_first_seen_first_per_box_or_for_every_box():
    state = NetworkState()
    feed(state, ("egress.allowed", {"url": "https://b.example.com:443"}), box_id="b2")
    feed(state, ("egress.allowed", {"url": "https://a.example.com:443"}),
         ("egress.allowed", {"url": "https://b.example.com:443"}), box_id="b1", start=2)
    assert [row.key.host for row in state.rows("b1")] == ["a.example.com", "b.example.com"]
    assert [(row.key.box_id, row.key.host) for row in state.rows()] == [
        ("b2", "b.example.com"), ("b1", "a.example.com"), ("b1", "b.example.com")]


def test_the_rows_are_bounded_the_least_recently_seen_dropped_and_counted():
    state = NetworkState(hosts_kept=3)
    feed(state, *[("egress.allowed", {"url": f"https://h{i}.example.com:443"}) for i in range(3)])
    feed(state, ("egress.allowed", {"url": "https://h0.example.com:443"}),  # h0 seen again: h1 is the oldest now
         ("egress.allowed", {"url": "https://h3.example.com:443"}), start=4)
    assert sorted(row.key.host for row in state.rows()) == ["h0.example.com", "h2.example.com", "h3.example.com"]
    assert state.dropped == 1
    assert "(1 older dropped)" in title_text(state, None, 3)


def test_latest_urls_are_bounded_per_row():
    state = NetworkState()
    feed(state, *[("egress.allowed", {"url": f"http://h.example.com:80/{i}"}) for i in range(RECENT_KEPT + 5)])
    row = state.rows()[0]
    assert len(row.recent) == RECENT_KEPT and row.recent[-1].url.endswith(f"/{RECENT_KEPT + 4}")
    assert row.allowed == RECENT_KEPT + 5


def test_an_event_seen_before_or_of_another_kind_changes_nothing():
    state = NetworkState()
    assert state.apply(make_event(5, "b1", "egress.allowed", url=GITHUB))
    version = state.version
    assert not state.apply(make_event(5, "b1", "egress.allowed", url=GITHUB))
    assert not state.apply(make_event(4, "b1", "egress.allowed", url=GITHUB))
    assert not state.apply(make_event(6, "b1", "exec.finished"))
    assert state.rows()[0].allowed == 1 and state.version == version


def test_bytes_that_are_not_counts_count_nothing():
    state = NetworkState()
    feed(state, ("egress.closed", {"url": GITHUB, "up": -5, "down": True}),
         ("egress.closed", {"url": GITHUB, "up": "9", "down": 3}))
    row = state.rows()[0]
    assert (row.up, row.down, row.closed) == (0, 3, 2)


def test_the_allowlist_event_gives_the_boxs_entries_and_its_last_change():
    state = NetworkState()
    feed(state, ("egress.allowlist", {"action": "start", "by": "settings", "entries": ["pypi.org", "*.npmjs.org"]}),
         ("egress.allowlist", {"action": "allow", "by": "uid 1000 (op)", "added": ["files.example.org"],
                               "removed": [], "entries": ["pypi.org", "*.npmjs.org", "files.example.org"]}))
    box = state.box("b1")
    assert box.entries == ("pypi.org", "*.npmjs.org", "files.example.org")
    assert box.last_change == "allow added files.example.org by uid 1000 (op)"
    assert state.box("b2").entries is None


# -- reading urls ---------------------------------------------------------------------------------------------

def test_split_url_reads_the_three_schemes_and_refuses_the_rest():
    assert split_url("https://api.github.com:443") == ("https", "api.github.com", 443, "")
    assert split_url("tcp://[2001:db8::1]:7007") == ("tcp", "[2001:db8::1]", 7007, "")
    assert split_url("http://h.example:80/p?q=1") == ("http", "h.example", 80, "/p?q=1")
    for bad in ("https://h.example", "https://h.example:0", "https://h.example:65536", "https://h.example:0443",
                "ftp://h.example:21", "https://h\x1b.example:443", "https://:443", "https://h.example:443x",
                "https://user@h.example:443", "https://h.example:443#frag", " https://h.example:443", 7):
        assert split_url(bad) is None, bad
    assert split_target("deb.debian.org:80") == ("deb.debian.org", 80)
    assert split_target("[::1]:443") == ("[::1]", 443)
    assert split_target("deb.debian.org") is None and split_target("a:b:1") is None


@given(st.text(max_size=80))
def test_split_url_is_exact_or_nothing(text):
    """Whatever it reads, the url is exactly the parts it gives, joined again: it never guesses."""
    parts = split_url(text)
    if parts is not None:
        scheme, host, port, rest = parts
        assert f"{scheme}://{host}:{port}{rest}" == text and 1 <= port <= 65535
        assert scheme in ("https", "http", "tcp") and host.isascii() and host.isprintable()


@given(st.sampled_from(["https", "http", "tcp"]),
       st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,30}[a-z0-9])?", fullmatch=True) | st.ip_addresses(v=4).map(str)
       | st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
       st.integers(1, 65535), st.sampled_from(["", "/", "/p?q=1", "/\x1b[2J?\u202e"]))
def test_split_url_reads_every_url_the_proxy_writes(scheme, host, port, rest):
    url = f"{scheme}://{host}:{port}{rest if scheme == 'http' else ''}"
    assert split_url(url) == (scheme, host, port, rest if scheme == "http" else "")
    assert split_target(f"{host}:{port}") == (host, port)


# -- what the view says -----------------------------------------------------------------------------------------

def test_the_entry_an_allow_sends_names_the_port_unless_it_is_the_schemes_own():
    assert allow_entry(HostKey("b1", "https", "api.github.com", 443)) == "api.github.com"
    assert allow_entry(HostKey("b1", "http", "pypi.example.org", 80)) == "pypi.example.org"
    assert allow_entry(HostKey("b1", "https", "api.github.com", 8443)) == "api.github.com:8443"
    assert allow_entry(HostKey("b1", "tcp", "db.example.net", 443)) == "db.example.net:443"
    assert allow_entry(HostKey("b1", "", "deb.debian.org", 80)) == "deb.debian.org:80"
    assert allow_entry(HostKey("b1", "https", "[2001:db8::1]", 443)) == "[2001:db8::1]"
    assert allow_entry(HostKey("b1", "tcp", "[2001:db8::1]", 7007)) == "[2001:db8::1]:7007"
    assert block_entry(HostKey("b1", "tcp", "db.example.net", 5432)) == "db.example.net"
    assert entry_meaning("api.github.com") == "HTTPS on port 443 and plain HTTP on port 80"
    assert entry_meaning("[2001:db8::1]").startswith("HTTPS on port 443")
    assert entry_meaning("[2001:db8::1]:7007").startswith("port 7007 only")
    assert entry_meaning("192.0.2.1:80").startswith("port 80 only")


def test_box_text_in_urls_and_reasons_is_escaped_everywhere_it_is_shown():
    state = NetworkState()
    hostile = "http://h.example:80/\x1b]52;c;cm0K\x07?\u202e"
    feed(state, ("egress.refused", {"rule": "egress-denied", "reason": "denied \x1b[2J", "url": hostile}))
    row = state.rows()[0]
    shown = [*host_cells(row, "web\x1b[31m"), *(value for _, value in detail_lines(row, "web", state.box("b1"))),
             *recent_lines(row)]
    assert not any("\x1b" in text or "\x07" in text or "\u202e" in text for text in shown)
    assert any("\\x1b]52;c;cm0K\\x07?\\u202e" in text for text in recent_lines(row))


def test_the_confirm_lists_what_the_allow_would_have_let_through_with_the_urls_seen():
    state = NetworkState()
    feed(state, ("egress.held", {"url": PYPI, "approval_id": "apr-1"}),
         ("egress.refused", {"rule": "egress-not-approved", "reason": "not approved", "url": PYPI}),
         ("egress.refused", {"rule": "egress-not-approved", "reason": "not approved",
                             "url": "http://pypi.example.org:80/other"}))
    change = AllowlistChangeInfo("allow", "uid 1000 (op)", ("pypi.example.org",), ("!pypi.example.org",), False,
                                 AllowlistInfo("b1", "web", "running", ("pypi.example.org",)),
                                 notes=("pypi.example.org: still blocked: !a.pypi.example.org",),
                                 would_let_through=({"host": "pypi.example.org", "port": 80, "kind": "http",
                                                     "outcome": "rejected"},
                                                    {"host": "pypi.example.org", "port": 443, "kind": "https",
                                                     "outcome": "refused_off_list"}))
    text = allow_confirm_text("pypi.example.org", change, state, "b1")
    assert "adds:    pypi.example.org" in text and "removes: !pypi.example.org" in text
    assert "note:    pypi.example.org: still blocked" in text
    assert "it would have let through (2):" in text
    assert "http pypi.example.org port 80: held, then rejected" in text
    assert "https pypi.example.org port 443: refused: off the list" in text
    # each url once, newest first
    assert text.index("pypi.example.org:80/other") < text.index("/simple/requests/?page=2")
    assert text.count("/simple/requests/?page=2") == 1
    nothing = allow_confirm_text("x.example", AllowlistChangeInfo(
        "allow", "op", ("x.example",), (), False, AllowlistInfo("b1", "web", "running", ("x.example",))), state, "b1")
    assert "it would have let none through" in nothing


def test_docs_console_md_states_the_bounds_the_view_keeps():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "console.md").read_text(encoding="utf-8")
    section = docs[docs.index("## The network view"):docs.index("## The event page")]
    assert f"keeps the {HOSTS_KEPT} host rows" in section and f"{RECENT_KEPT} urls per row" in section
    assert f"{TEXT_KEPT:,} characters" in section

"""The egress allowlist (daemon/egress/allowlist.py, allowlist_edit.py, presets.py, pins.py): what an entry may be,
what it lets through, how allow, block and set change a list, what a change would have let through, the presets and
pinned names, and the box settings that carry them."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

import pytest

from tkbox_daemon import limits
from tkbox_daemon.boxes.settings import SettingsError, parse_settings
from tkbox_daemon.egress import presets
from tkbox_daemon.egress.allowlist import Allowlist, Attempt, Entry, EntryError, parse_entry, replay
from tkbox_daemon.egress.allowlist_edit import ChangeRefused, allow, block, change, replace_all
from tkbox_daemon.egress.pins import PinError, parse_pins, pinned

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("text", "entry"), [
    ("pypi.org", Entry("pypi.org")),
    ("PyPI.Org.", Entry("pypi.org")),
    ("example.com:8443", Entry("example.com", port=8443)),
    ("*.github.com", Entry("github.com", wildcard=True)),
    ("*.github.com:22", Entry("github.com", wildcard=True, port=22)),
    ("!gist.github.com", Entry("gist.github.com", block=True)),
    ("93.184.216.34", Entry("93.184.216.34", "ipv4")),
    ("93.184.216.34:8080", Entry("93.184.216.34", "ipv4", port=8080)),
    ("[2001:DB8:0::1]:443", Entry("2001:db8::1", "ipv6", port=443)),
    ("[::ffff:192.0.2.1]", Entry("::ffff:192.0.2.1", "ipv6")),
    ("bücher.de", Entry("xn--bcher-kva.de")),
])
def test_entries_are_read_into_one_canonical_form(text, entry):
    assert parse_entry(text) == entry
    assert parse_entry(entry.text) == entry


@pytest.mark.parametrize(("text", "words"), [
    ("", "an entry is one of"),
    ("localhost", "single label"),
    ("intranet", "single label"),
    ("*.com", "top-level domain"),
    ("*.*.a.com", "'*'"),
    ("a*.example.com", "'*' is only ever the whole first label"),
    ("127.1", "ends in a number"),
    ("0x7f.0.0.1", "ends in a number"),
    ("host.0x1", "ends in a number"),
    ("010.1.1.1", "dotted quad"),
    ("2001:db8::1", "in brackets"),
    ("[fe80::1%25eth0]", "zone id"),
    ("[::1]x", "[ADDRESS]:PORT"),
    ("a_b.example.com", "rule host-chars"),
    ("a..example.com", "empty label"),
    ("example.com:0", "not a port"),
    ("example.com:0443", "not a port"),
    ("example.com:65536", "not a port"),
    ("example.com:", "not a port"),
    ("user@example.com", "'@'"),
    ("exam ple.com", "U+0020"),
    ("metadata.google.internal", "special-use"),
    ("\uff41.com", "IDNA 2008"),
    ("xn--abc.de", "not a valid A-label"),
    ("x" * 400, "at most 300 characters"),
])
def test_a_wrong_entry_is_refused_saying_what_to_write(text, words):
    with pytest.raises(EntryError) as raised:
        parse_entry(text)
    assert words in str(raised.value)


def test_a_bare_host_is_https_on_443_and_http_on_80_only():
    listed = Allowlist.parse(["pypi.org"])
    assert listed.match("pypi.org", 443, "https") == Entry("pypi.org")
    assert listed.match("pypi.org", 80, "http") == Entry("pypi.org")
    for port, scheme in ((443, "http"), (80, "https"), (8443, "https"), (443, "tcp"), (80, "tcp"), (22, "tcp")):
        assert listed.match("pypi.org", port, scheme) is None, (port, scheme)


def test_a_port_entry_is_that_port_only_whatever_it_carries():
    listed = Allowlist.parse(["git.example.com:22"])
    for scheme in ("https", "http", "tcp"):
        assert listed.match("git.example.com", 22, scheme) == Entry("git.example.com", port=22)
    assert listed.names_port("git.example.com", 22) == Entry("git.example.com", port=22)
    assert listed.match("git.example.com", 443, "https") is None and listed.names_port("git.example.com", 23) is None


def test_a_tunnel_that_is_not_tls_needs_an_entry_naming_its_port():
    listed = Allowlist.parse(["example.com", "*.example.com"])
    assert listed.names_port("example.com", 443) is None and listed.names_port("a.example.com", 443) is None
    assert Allowlist.parse(["example.com:443"]).names_port("example.com", 443) == Entry("example.com", port=443)


def test_a_wildcard_is_the_names_under_its_base_never_the_base():
    listed = Allowlist.parse(["*.example.com"])
    assert listed.match("a.example.com", 443, "https") == Entry("example.com", wildcard=True)
    assert listed.match("a.b.example.com", 80, "http") is not None
    for host in ("example.com", "aexample.com", "a.example.com.evil.net", "example.com.evil.net"):
        assert listed.match(host, 443, "https") is None, host


def test_matching_is_on_whole_labels_and_folds_only_ascii_case():
    listed = Allowlist.parse(["allowed.com"])
    assert listed.match("ALLOWED.com", 443, "https") is not None
    for host in ("evil-allowed.com", "allowed.com.evil.com", "xallowed.com", "allowed.co", "allowed.com.",
                 "allowed\u212a.com", "", "[allowed.com]"):
        assert listed.match(host, 443, "https") is None, host


def test_ip_entries_match_the_same_address_in_any_form_the_proxy_gives():
    listed = Allowlist.parse(["192.0.2.1", "[2001:db8::1]:8443"])
    assert listed.match(IPv4Address("192.0.2.1"), 443, "https") is not None
    assert listed.match("192.0.2.1", 80, "http") is not None
    for host in ("2001:db8::1", "[2001:db8::1]", "[2001:DB8:0:0::1]", IPv6Address("2001:db8::1")):
        assert listed.match(host, 8443, "tcp") is not None, host
    assert listed.match("::ffff:192.0.2.1", 443, "https") is None  # a mapped address is not its IPv4 here
    assert listed.match("[2001:db8::1%eth0]", 8443, "tcp") is None


def test_a_block_wins_over_every_allow_and_without_a_port_covers_every_port():
    listed = Allowlist.parse(["*.github.com", "gist.github.com:22", "!gist.github.com"])
    assert listed.match("api.github.com", 443, "https") is not None
    assert listed.match("gist.github.com", 443, "https") is None and listed.names_port("gist.github.com", 22) is None
    assert listed.blocked("gist.github.com", 22) == Entry("gist.github.com", block=True)
    assert listed.blocked("api.github.com", 443) is None


def test_the_narrowest_entry_is_the_one_named():
    listed = Allowlist.parse(["*.example.com", "*.a.example.com", "b.a.example.com", "b.a.example.com:443"])
    assert listed.match("b.a.example.com", 443, "https") == Entry("b.a.example.com", port=443)
    assert listed.match("c.a.example.com", 443, "https") == Entry("a.example.com", wildcard=True)


def test_an_unknown_scheme_is_a_programming_error_and_odd_ports_match_nothing():
    with pytest.raises(ValueError):
        Allowlist.parse(["a.com"]).match("a.com", 443, "ftp")
    assert Allowlist.parse(["a.com:443"]).match("a.com", 0, "tcp") is None


def test_a_list_keeps_its_order_drops_duplicates_and_names_the_wrong_entry():
    assert Allowlist.parse(["b.com", "a.com", "B.com"]).texts() == ["b.com", "a.com"]
    with pytest.raises(EntryError) as raised:
        Allowlist.parse(["a.com", "127.1"])
    assert str(raised.value).startswith("entry 2 '127.1': ")


def test_a_list_is_bounded():
    many = [f"h{index}.example.com" for index in range(limits.ALLOWLIST_ENTRIES.default + 1)]
    with pytest.raises(EntryError) as raised:
        Allowlist.parse(many)
    assert "allowlist_entries" in str(raised.value)


# ---- changes ----------------------------------------------------------------------------------------------------

def texts(items):
    return [entry.text for entry in items]


def test_allow_adds_and_says_what_was_there_already():
    made = allow(Allowlist.parse(["a.com"]), ["a.com", "b.com:8443"])
    assert made.after.texts() == ["a.com", "b.com:8443"] and texts(made.added) == ["b.com:8443"]
    assert made.notes == ("a.com was already allowed",) and made.changed


def test_block_removes_what_it_covers_and_blocks_what_a_wider_entry_still_allows():
    start = Allowlist.parse(["a.com", "a.com:8443", "*.h.com", "x.h.com"])
    made = block(start, ["a.com", "x.h.com"])
    assert made.after.texts() == ["*.h.com", "!x.h.com"]
    assert texts(made.removed) == ["a.com", "a.com:8443", "x.h.com"] and texts(made.added) == ["!x.h.com"]
    assert made.after.match("x.h.com", 443, "https") is None and made.after.match("y.h.com", 443, "https")


def test_block_of_one_port_keeps_the_others():
    made = block(Allowlist.parse(["a.com"]), ["a.com:443"])
    assert made.after.texts() == ["a.com", "!a.com:443"]
    assert made.after.match("a.com", 443, "https") is None and made.after.match("a.com", 80, "http")


def test_block_of_what_nothing_allows_changes_nothing_and_says_so():
    made = block(Allowlist.parse(["a.com"]), ["b.com"])
    assert not made.changed and "b.com was not allowed; nothing changed" in made.notes[0]


def test_allow_after_block_undoes_it_and_keeps_shut_what_the_block_held_against_other_entries():
    start = Allowlist.parse(["*.h.com", "*.h.com:8443"])
    blocked = block(start, ["a.h.com"]).after
    assert blocked.texts() == ["*.h.com", "*.h.com:8443", "!a.h.com"]
    reopened = allow(blocked, ["a.h.com"]).after
    assert reopened.match("a.h.com", 443, "https") is not None
    assert reopened.match("a.h.com", 8443, "tcp") is None  # the block on 8443 stays: allow a.h.com did not ask it
    assert "!a.h.com:8443" in reopened.texts() and "!a.h.com" not in reopened.texts()


def test_a_narrower_allow_does_not_reopen_a_wider_block():
    blocked = block(Allowlist.parse(["*.h.com"]), ["*.a.h.com"]).after
    assert blocked.texts() == ["*.h.com", "!*.a.h.com"]
    with pytest.raises(ChangeRefused) as raised:
        allow(blocked, ["x.a.h.com"])
    assert "stays blocked by !*.a.h.com" in str(raised.value) and "allow *.a.h.com" in str(raised.value)
    wider = allow(blocked, ["*.a.h.com"]).after
    assert wider.match("x.a.h.com", 443, "https") is not None


def test_a_wider_allow_keeps_the_blocks_under_it_and_says_so():
    blocked = block(Allowlist.parse(["*.h.com", "*.g.com"]), ["a.h.com"]).after
    made = allow(blocked, ["*.h.com:8443"])
    assert made.after.match("a.h.com", 8443, "tcp") is None
    assert any("still blocked: !a.h.com" in note for note in made.notes)


def test_allow_and_block_take_hosts_and_set_takes_entries():
    with pytest.raises(ChangeRefused) as raised:
        allow(Allowlist(), ["!a.com"])
    assert "tkbox block BOX a.com" in str(raised.value)
    with pytest.raises(ChangeRefused):
        block(Allowlist(), [])
    assert replace_all(Allowlist(), ["a.com", "!b.a.com"]).after.texts() == ["a.com", "!b.a.com"]


def test_set_to_nothing_is_the_kill_switch():
    made = replace_all(Allowlist.parse(["a.com", "*.b.com"]), [])
    assert len(made.after) == 0 and texts(made.removed) == ["a.com", "*.b.com"] and "kill switch" in made.notes[0]
    assert made.after.match("a.com", 443, "https") is None


def test_a_change_is_all_or_nothing():
    start = Allowlist.parse(["a.com"])
    with pytest.raises(ChangeRefused) as raised:
        change(start, "allow", ["b.com", "127.1"])
    assert "127.1" in str(raised.value) and start.texts() == ["a.com"]
    with pytest.raises(ChangeRefused):
        change(start, "erase", ["a.com"])


def test_presets_expand_in_place_and_carry_their_warning():
    made = allow(Allowlist(), ["preset:pypi", "example.com", "preset:go-proxy"])
    assert made.after.texts() == ["pypi.org", "files.pythonhosted.org", "example.com", "proxy.golang.org",
                                  "sum.golang.org"]
    assert made.presets == ("pypi", "go-proxy") and made.notes[0].startswith("WARNING preset:go-proxy: ")
    with pytest.raises(ChangeRefused) as raised:
        allow(Allowlist(), ["preset:nope"])
    assert "preset:pypi" in str(raised.value)


def test_every_preset_is_valid_and_the_required_ones_are_there():
    for name, preset in presets.PRESETS.items():
        assert Allowlist.parse(list(preset.entries)).texts() == list(preset.entries), name
    assert set(presets.PRESETS) >= {"pypi", "npm", "debian", "github", "anthropic", "openai", "go-proxy"}
    assert presets.PRESETS["github"].entries == ("github.com", "api.github.com", "codeload.github.com",
                                                 "objects.githubusercontent.com", "raw.githubusercontent.com")
    assert "relays" in presets.PRESETS["go-proxy"].warning or "any module from any host" in \
        presets.PRESETS["go-proxy"].warning


def test_the_presets_section_of_the_docs_is_the_table_in_the_code():
    text = (ROOT / "docs" / "egress.md").read_text()
    assert "## Presets" in text
    section = text.split("<!-- presets:begin -->\n", 1)[1].split("<!-- presets:end -->", 1)[0]
    assert section == presets.markdown(), "regenerate with: python -m tkbox_daemon.egress.presets"


# ---- replay -----------------------------------------------------------------------------------------------------

def test_replay_names_the_attempts_kept_in_by_the_list_that_the_new_list_admits():
    attempts = [Attempt("a.com", 443, "https", "held"), Attempt("a.com", 443, "https", "allowed"),
                Attempt("a.com", 22, "tcp", "rejected"), Attempt("b.a.com", 443, "https", "expired"),
                Attempt("a.com", 80, "http", "refused"), Attempt("a.com", 80, "http", "refused_off_list"),
                Attempt("c.com", 443, "https", "withdrawn")]
    before = Allowlist()
    assert replay(before, Allowlist.parse(["a.com"]), attempts) == [attempts[0], attempts[5]]
    assert replay(before, Allowlist.parse(["a.com:22"]), attempts) == [attempts[2]]
    assert replay(Allowlist.parse(["a.com"]), Allowlist.parse(["a.com", "*.a.com"]), attempts) == [attempts[3]]


# ---- pins and settings ------------------------------------------------------------------------------------------

def test_pins_are_read_strictly_from_flags_or_a_mapping():
    assert parse_pins(["Up.test=93.184.216.1,[2606:2800:220:1::1]", "up.test=93.184.216.1"]) == {
        "up.test": ("93.184.216.1", "2606:2800:220:1::1")}
    assert parse_pins({"up.test": "93.184.216.1", "down.test": ["2606:2800:220:1::2"]}) == {
        "up.test": ("93.184.216.1",), "down.test": ("2606:2800:220:1::2",)}
    assert pinned({"up.test": ("93.184.216.1",)}, "up.test") == [IPv4Address("93.184.216.1")]
    assert pinned({"up.test": ("93.184.216.1",)}, "other.test") is None


@pytest.mark.parametrize("value", [["up.test"], ["up.test=010.0.0.1"], ["up.test=127.1"], ["*.up.test=93.184.216.1"],
                                   ["up.test:80=93.184.216.1"], ["up=93.184.216.1"], ["up.test=fe80::1%eth0"],
                                   {"up.test": []}, {"up.test": 3}, "up.test=93.184.216.1"])
def test_a_wrong_pin_is_refused(value):
    with pytest.raises(PinError):
        parse_pins(value)


def test_pins_are_bounded():
    with pytest.raises(PinError) as raised:
        parse_pins({"up.test": [f"93.184.216.{n}" for n in range(limits.RESOLVE_ADDRESSES.default + 1)]})
    assert "resolve_addresses" in str(raised.value)


def test_box_settings_take_allow_with_presets_and_resolve(tmp_path):
    settings = parse_settings({"workspace": str(tmp_path), "allow": ["preset:npm", "Example.com:8443"],
                               "resolve": ["up.test=93.184.216.1"]}, default_name="b", environ={})
    assert settings.allow == ("registry.npmjs.org", "example.com:8443") and settings.allow_presets == ("npm",)
    assert settings.resolve == {"up.test": ("93.184.216.1",)}
    public = settings.public()
    assert public["allow"] == ["registry.npmjs.org", "example.com:8443"] and public["allow_presets"] == ["npm"]
    assert public["resolve"] == {"up.test": ["93.184.216.1"]}


@pytest.mark.parametrize(("raw", "field", "words"), [
    ({"allow": "pypi.org"}, "allow", "a list of hosts"),
    ({"allow": ["127.1"]}, "allow", "entry 1 '127.1'"),
    ({"allow": ["preset:nope"]}, "allow", "names no preset"),
    ({"resolve": ["nope"]}, "resolve", "NAME=ADDR"),
])
def test_wrong_egress_settings_name_their_field(tmp_path, raw, field, words):
    with pytest.raises(SettingsError) as raised:
        parse_settings({"workspace": str(tmp_path), **raw}, default_name="b", environ={})
    assert raised.value.field == field and words in str(raised.value)

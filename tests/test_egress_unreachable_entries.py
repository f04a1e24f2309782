"""An allow entry or a pin that names an address the proxy refuses whatever the list says (private, loopback,
metadata, documentation, ... in any spelling the parser reads, embeddings included) could never let anything
through: it is refused where it is made (box settings, ``tkbox allow``, ``set``), with the range and what to do,
and nothing changes. A block of such an address is harmless and still taken."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.daemon_harness import make_workspace, run_cli, running_daemon
from tkbox_daemon.boxes.settings import SettingsError, parse_settings
from tkbox_daemon.egress.allowlist import parse_entry, refused_address
from tkbox_daemon.egress.allowlist_edit import ChangeRefused, change
from tkbox_daemon.egress.ranges import SPECIAL_RANGES, classify

NEVER_REACHED = ["169.254.169.254", "10.1.2.3", "127.0.0.1", "192.0.2.1", "100.100.100.200", "0.0.0.0",
                 "[::1]", "[fd00:ec2::254]", "[::ffff:169.254.169.254]", "[64:ff9b::a00:1]", "[2001:db8::1]:8443",
                 "192.168.1.1:22"]


@pytest.mark.parametrize("text", NEVER_REACHED)
def test_box_settings_refuse_an_entry_and_a_pin_that_could_never_work(tmp_path, text):
    with pytest.raises(SettingsError) as raised:
        parse_settings({"workspace": str(tmp_path), "allow": ["pypi.org", text]}, default_name="b", environ={})
    assert raised.value.field == "allow" and "would let nothing through" in str(raised.value)
    assert "whatever the allowlist says" in str(raised.value) and " is in " in str(raised.value)
    address = text.rsplit(":", 1)[0] if not text.startswith("[") else text.split("]")[0] + "]"
    with pytest.raises(SettingsError) as raised:
        parse_settings({"workspace": str(tmp_path), "resolve": [f"up.example={address}"]}, default_name="b",
                       environ={})
    assert raised.value.field == "resolve" and "would refuse every connection to up.example" in str(raised.value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([entry for entry in SPECIAL_RANGES if entry.refused]), st.integers(min_value=0),
       st.booleans())
def test_an_address_entry_is_refused_exactly_when_the_proxy_refuses_its_address(special, offset, with_port):
    """For any address in a refused special range, its allow entry is refused and its block is not; for the
    address the entry names, ``refused_address`` agrees with the proxy's own ``classify``."""
    network = special.network
    address = network[offset % network.num_addresses]
    host = f"[{address}]" if address.version == 6 else str(address)
    try:
        entry = parse_entry(f"{host}:443" if with_port else host)
    except ValueError:
        return  # a text the entry parser refuses outright (a zone, an unreadable form) is refused anyway
    assert (refused_address(entry) is not None) == (classify(address) is not None)
    assert refused_address(entry) is not None
    assert refused_address(parse_entry(f"!{entry.text}")) is None


@pytest.mark.parametrize("text", ["93.184.216.34", "[2606:2800:220:1::1]:443", "pypi.org", "*.example.com"])
def test_an_entry_the_proxy_can_reach_is_taken(tmp_path, text):
    parsed = parse_settings({"workspace": str(tmp_path), "allow": [text], "resolve": ["up.example=93.184.216.34"]},
                            default_name="b", environ={})
    assert len(parsed.allow) == 1 and parsed.resolve == {"up.example": ("93.184.216.34",)}


def test_a_live_change_refuses_such_an_entry_and_blocks_it_freely():
    from tkbox_daemon.egress.allowlist import Allowlist

    current = Allowlist.parse(["pypi.org"])
    for action in ("allow", "set"):
        with pytest.raises(ChangeRefused) as raised:
            change(current, action, ["example.org", "[::ffff:10.0.0.1]"])
        assert "[::ffff:10.0.0.1] would let nothing through: ::ffff:a00:1 carries 10.0.0.1" in str(raised.value)
    blocked = change(current, "block", ["10.0.0.1"])
    assert blocked.changed or blocked.notes  # a block of an address no entry allows is taken (or noted), never refused


async def test_tkbox_allow_refuses_it_in_one_line_and_the_list_is_unchanged(tmp_path, monkeypatch, capsys):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        monkeypatch.setenv("TKBOX_DAEMON_RUNTIME_DIR", str(daemon.config.paths.runtime_dir))
        await client.create_box({"name": "web", "workspace": str(make_workspace(tmp_path)), "allow": ["pypi.org"]})
        status, _, err = await run_cli(capsys, "allow", "web", "169.254.169.254")
        assert status == 2 and err.count("\n") == 1, err
        assert err.startswith("tkbox allow: the entry 169.254.169.254 would let nothing through: 169.254.169.254 is "
                              "in 169.254.169.254/32: instance metadata")
        assert (await client.allowlist("web")).entries == ("pypi.org",)

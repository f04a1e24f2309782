"""``tkbox allow | block | allowlist`` and the allowlist lines of ``tkbox run``, in process, against the real daemon
(in process, real signer, the test-only unisolated backend): what each prints, the shape of its ``--json``, and the
daemon's refusals in the CLI's words, escaped."""

from __future__ import annotations

import json
import os
import pwd

import pytest

from tests.daemon_harness import make_workspace, run_cli, running_daemon
from tkbox_daemon.egress.allowlist import Attempt
from tkbox_tui.cli.allowlist import entry_meaning

ME = f"uid {os.getuid()} ({pwd.getpwuid(os.getuid()).pw_name})"


@pytest.fixture
async def daemon(tmp_path, monkeypatch):
    async with running_daemon(tmp_path) as running, running.client() as client:
        monkeypatch.setenv("TKBOX_DAEMON_RUNTIME_DIR", str(running.config.paths.runtime_dir))
        await client.create_box({"name": "web", "workspace": str(make_workspace(tmp_path)),
                                 "allow": ["preset:pypi", "*.example.com"], "resolve": {"up.test": "93.184.216.7"}})
        yield running


run = run_cli


async def test_allowlist_shows_each_entry_with_what_it_lets_through(daemon, capsys):
    status, out, err = await run(capsys, "allowlist", "web")
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "box web (running): 3 entries",
        "  pypi.org                HTTPS on 443, HTTP on 80",
        "  files.pythonhosted.org  HTTPS on 443, HTTP on 80",
        "  *.example.com           every name under example.com: HTTPS on 443, HTTP on 80",
        "presets named when it started: pypi",
        "pinned: up.test -> 93.184.216.7"]
    status, out, _ = await run(capsys, "allowlist", "web", "--json")
    assert status == 0 and json.loads(out) == {
        "box_id": daemon.manager.get("web").id, "box_name": "web", "state": "running",
        "entries": ["pypi.org", "files.pythonhosted.org", "*.example.com"], "presets": ["pypi"],
        "resolve": {"up.test": ["93.184.216.7"]}}


async def test_allow_says_what_it_added_and_the_box_reads_it_next(daemon, capsys):
    status, out, err = await run(capsys, "allow", "web", "preset:npm", "git.test:22")
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "box web: added registry.npmjs.org, git.test:22",
        "presets: preset:npm",
        "box web now has 5 entries; see them with: tkbox allowlist web"]
    assert daemon.manager.get("web").egress_allowlist.names_port("git.test", 22) is not None
    status, out, _ = await run(capsys, "allow", "web", "git.test:22", "--json")
    change = json.loads(out)
    assert status == 0 and change["applied"] is False and change["notes"] == ["git.test:22 was already allowed"]
    assert change["by"] == ME and change["allowlist"]["entries"][-1] == "git.test:22"


async def test_allow_dry_run_shows_what_it_would_have_let_through_and_changes_nothing(daemon, capsys):
    box = daemon.manager.get("web")
    box.allowlist.note_attempt(Attempt("pkg.test", 443, "https", "held"))
    box.allowlist.note_attempt(Attempt("pkg.test", 443, "https", "allowed"))
    status, out, _ = await run(capsys, "allow", "web", "pkg.test", "--dry-run")
    assert status == 0 and out.splitlines() == [
        "box web: would add pkg.test",
        "would have let through 1 earlier attempt(s) of this box: https://pkg.test:443 (held)",
        "dry run: nothing changed; run it again without --dry-run to make the change"]
    assert box.egress_allowlist.match("pkg.test", 443, "https") is None


async def test_block_carves_out_of_a_wildcard_and_all_is_the_kill_switch(daemon, capsys):
    status, out, _ = await run(capsys, "block", "web", "api.example.com", "pypi.org")
    assert status == 0 and out.splitlines()[:2] == ["box web: added !api.example.com", "box web: removed pypi.org"]
    assert (await run(capsys, "allowlist", "web"))[1].splitlines()[3] == (
        "  !api.example.com        blocked on every port")
    status, out, _ = await run(capsys, "block", "web", "nothing.test")
    assert status == 0 and out.splitlines() == [
        "box web: nothing changed",
        "note: nothing.test was not allowed; nothing changed (a host off the list is not let through without a "
        "person)"]
    status, out, _ = await run(capsys, "block", "web", "--all")
    assert status == 0 and out.splitlines()[-1] == (
        "box web now has 0 entries: nothing is allowed: every connection waits for a person (the kill switch); "
        "see them with: tkbox allowlist web")
    assert (await run(capsys, "allowlist", "web"))[1].splitlines()[0] == (
        "box web (running): nothing is allowed: every connection waits for a person (the kill switch)")


async def test_refusals_are_one_line_in_the_cli_words_escaped(daemon, capsys):
    status, out, err = await run(capsys, "allow", "web", "127.1")
    assert (status, out) == (2, "") and err.startswith("tkbox allow: '127.1': the entry '127.1' ends in a number")
    assert err.rstrip("\n").endswith("; see the box's list with: tkbox allowlist BOX")
    status, out, err = await run(capsys, "allow", "web", "a\x1b[2J.test")
    assert status == 2 and "\x1b" not in err and err.count("\n") == 1
    status, out, _ = await run(capsys, "allow", "--json", "web", "localhost")
    error = json.loads(out)["error"]
    assert status == 2 and error["code"] == "invalid_allowlist" and "single label" in error["message"]
    assert await run(capsys, "allowlist", "nope") == (
        2, "", "tkbox allowlist: box 'nope' not found; list the boxes with: tkbox ls\n")
    for argv in (["block", "web"], ["block", "web", "a.test", "--all"], ["allow", "web"]):
        status, _, err = await run(capsys, *argv)
        assert status == 2 and err.startswith(f"tkbox {argv[0]}: ") and "--help" in err, argv


async def test_run_prints_the_list_it_starts_with_presets_warnings_and_pins(daemon, capsys, tmp_path):
    workspace = tmp_path / "second"
    workspace.mkdir()
    status, out, err = await run(capsys, "run", "--name", "go", "--workspace", str(workspace), "--allow",
                                 "preset:go-proxy", "--allow", "Example.org:8443", "--resolve",
                                 "up.test=93.184.216.7,[2606:2800:220:1::7]")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[2:5] == ["  allow: proxy.golang.org, sum.golang.org, example.org:8443",
                          "    preset:go-proxy = proxy.golang.org, sum.golang.org",
                          "  WARNING preset:go-proxy: the Go module proxy fetches any module from any host on the "
                          "box's behalf: allowing it lets code from anywhere into the box, and every module path the "
                          "box asks for (which can carry data) out to the proxy. Prefer vendored modules (go mod "
                          "vendor) or a module mirror you run"]
    assert lines[5] == "  pinned: up.test -> 93.184.216.7, 2606:2800:220:1::7"
    status, out, err = await run(capsys, "run", "--name", "bad", "--workspace", str(workspace), "--allow", "127.1")
    assert status == 2 and err.startswith("tkbox run: allow: entry 1 '127.1': the entry '127.1' ends in a number")
    assert daemon.manager.get("go") and [box.name for box in daemon.manager.list()] == ["web", "go"]
    status, out, err = await run(capsys, "run", "--name", "strict", "--workspace", str(workspace), "--inspect", "all")
    assert (status, err) == (0, "") and out.splitlines()[2:] == [
        "  allow: nothing is allowed: every connection is refused",
        "  inspect: all (a host off the list is refused at once, never held for a person)"]
    status, out, err = await run(capsys, "run", "--name", "bad", "--workspace", str(workspace), "--inspect", "al")
    assert status == 2 and err.startswith('tkbox run: inspect: "al" is not an inspect mode; write bound (')


@pytest.mark.parametrize(("entry", "meaning"), [
    ("a.test", "HTTPS on 443, HTTP on 80"),
    ("a.test:22", "port 22 only (HTTPS, HTTP or a tunnel that is not TLS)"),
    ("*.a.test:8443", "every name under a.test: port 8443 only (HTTPS, HTTP or a tunnel that is not TLS)"),
    ("[2001:db8::1]:443", "port 443 only (HTTPS, HTTP or a tunnel that is not TLS)"),
    ("[2001:db8::1]", "HTTPS on 443, HTTP on 80"),
    ("!*.a.test", "every name under a.test: blocked on every port"),
    ("!a.test:443", "blocked on port 443"),
])
def test_each_entry_is_put_in_words(entry, meaning):
    assert entry_meaning(entry) == meaning

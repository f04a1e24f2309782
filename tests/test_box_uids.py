"""Box uids are claimed host-wide: never twice at once across daemons, never a host user's, group's, sub-id range's
or live process's, released only by the daemon that claimed them, reclaimed from another daemon only when stale."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tkbox_daemon.box import host_ids
from tkbox_daemon.box.host_ids import HostIds, account_of, process_ids, process_start
from tkbox_daemon.box.uid_claims import ClaimHolder
from tkbox_daemon.box.uids import FIRST_BOX_UID, LOCK_NAME, UidAllocator, UidRegistryError, UidsExhausted

ROOT = os.geteuid() == 0


def quiet_host(tmp_path: Path, *, accounts: dict[int, str] | None = None, running: set[int] | None = None) -> HostIds:
    """A host with no sub-id ranges (unless the test writes them), the given accounts and process ids."""
    return HostIds(subuid=tmp_path / "subuid", subgid=tmp_path / "subgid", account=(accounts or {}).get,
                   processes=lambda: set(running or ()))


def daemon(registry: Path, name: str, host: HostIds, **kwargs) -> UidAllocator:
    return UidAllocator(registry, holder=ClaimHolder.this_process(daemon=name, records=kwargs.pop("records", None)),
                        host=host, **kwargs)


def claim_file(registry: Path, uid: int) -> dict:
    return json.loads((registry / str(uid)).read_bytes())


def test_uids_are_handed_out_lowest_first_and_released_only_by_their_box(tmp_path):
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path))
    first, second = allocator.allocate("box-a"), allocator.allocate("box-b")
    assert (first, second) == (FIRST_BOX_UID, FIRST_BOX_UID + 1)
    assert allocator.owner(first) == "box-a" and allocator.claimed() == {first: "box-a", second: "box-b"}
    assert allocator.release(first, "box-b") is False
    assert allocator.release(first, "box-a") is True and allocator.release(first, "box-a") is False
    assert allocator.allocate("box-c") == first


def test_a_claim_names_the_box_and_the_daemon_and_the_process_that_made_it(tmp_path):
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path), records=tmp_path / "records")
    uid = allocator.allocate("box-a")
    written = claim_file(tmp_path / "reg", uid)
    assert written == {"version": 1, "uid": uid, "box": "box-a", "daemon": "/state/a", "boot": host_ids.boot_id(),
                       "pid": os.getpid(), "start": process_start(os.getpid()), "records": str(tmp_path / "records")}
    mode = os.stat(tmp_path / "reg" / str(uid)).st_mode
    assert stat.S_IMODE(mode) == 0o600 and not [p for p in (tmp_path / "reg").iterdir() if p.name.startswith(".c")]


def test_two_daemons_share_the_registry_and_each_releases_only_its_own(tmp_path):
    host = quiet_host(tmp_path)
    one, two = daemon(tmp_path / "reg", "/state/one", host), daemon(tmp_path / "reg", "/state/two", host)
    handed = [one.allocate("same-box"), two.allocate("same-box"), one.allocate("a1"), two.allocate("b1")]
    assert len(set(handed)) == 4
    assert one.claimed() == {handed[0]: "same-box", handed[2]: "a1"}
    assert two.claimed() == {handed[1]: "same-box", handed[3]: "b1"}
    assert two.release(handed[0], "same-box") is False  # the same box id, but another daemon's claim
    assert one.owner(handed[0]) == "same-box"
    assert set(one.listing().claims) == set(handed)


def test_a_restarted_daemon_owns_the_claims_of_its_earlier_life(tmp_path):
    earlier = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from pathlib import Path
        from tkbox_daemon.box.host_ids import HostIds
        from tkbox_daemon.box.uid_claims import ClaimHolder
        from tkbox_daemon.box.uids import UidAllocator
        host = HostIds(subuid=Path("/nonexistent"), subgid=Path("/nonexistent"), account=lambda uid: None,
                       processes=set)
        print(UidAllocator(Path({str(tmp_path / "reg")!r}), holder=ClaimHolder.this_process(daemon="/state/a"),
                           host=host).allocate("box-a"))
    """)], capture_output=True, text=True, check=True, timeout=60)
    uid = int(earlier.stdout)
    again = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path))
    assert claim_file(tmp_path / "reg", uid)["pid"] != os.getpid()
    assert again.claimed() == {uid: "box-a"} and again.release(uid, "box-a") is True


def test_the_range_is_bounded_and_exhaustion_is_reported(tmp_path):
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path), first=FIRST_BOX_UID + 10, count=2)
    allocator.allocate("x")
    allocator.allocate("y")
    with pytest.raises(UidsExhausted, match="all 2 box uids from 100010"):
        allocator.allocate("z")
    for first, count in ((0, 10), (FIRST_BOX_UID - 1, 1), (FIRST_BOX_UID, 0), (0xFFFFFFFF, 1)):
        with pytest.raises(ValueError):
            UidAllocator(tmp_path / "other", first=first, count=count)


def test_host_users_groups_and_live_processes_keep_their_ids(tmp_path):
    accounts = {FIRST_BOX_UID: "user alice", FIRST_BOX_UID + 1: "group staff"}
    host = quiet_host(tmp_path, accounts=accounts, running={FIRST_BOX_UID + 2})
    assert daemon(tmp_path / "reg", "/state/a", host).allocate("box") == FIRST_BOX_UID + 3


def test_account_of_names_users_and_groups_of_the_host(monkeypatch):
    assert account_of(0) == "user root"
    monkeypatch.setattr(host_ids.pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    assert account_of(0) == "group root"  # a group alone is enough: the box's uid is its gid too
    monkeypatch.setattr(host_ids.grp, "getgrgid", lambda gid: (_ for _ in ()).throw(KeyError(gid)))
    assert account_of(0) is None


@pytest.mark.skipif(not ROOT, reason="starts a process under another uid and gid")
def test_process_ids_holds_the_uid_and_the_gid_of_every_live_process():
    uid, gid = FIRST_BOX_UID + 7777, FIRST_BOX_UID + 8888
    sleeper = subprocess.Popen(["sleep", "600"], user=uid, group=gid, extra_groups=[])
    try:
        assert {uid, gid} <= process_ids()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert uid not in process_ids() and gid not in process_ids()


def test_subordinate_ranges_of_both_files_are_skipped_and_read_again_when_changed(tmp_path):
    (tmp_path / "subuid").write_text("alice:100000:65536\n# a comment\n\n")
    (tmp_path / "subgid").write_text("1000:165536:10\n")
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path))
    assert allocator.allocate("a") == 165546
    (tmp_path / "subuid").write_text("alice:100000:65536\nbob:165547:1\n")
    assert allocator.allocate("b") == 165548


def test_a_line_that_cannot_be_read_stops_every_claim_until_it_is_fixed(tmp_path):
    (tmp_path / "subuid").write_text("alice:100000:65536\nbob:0x30d40:65536\n")
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path))
    with pytest.raises(UidRegistryError) as refused:
        allocator.allocate("a")
    message = str(refused.value)
    assert "subuid line 2 (bob:0x30d40:65536): start '0x30d40' is not a plain decimal number" in message
    assert "Fix or delete those lines" in message and allocator.listing().claims == {}
    (tmp_path / "subuid").write_text("alice:100000:65536\nbob:200000:65536\n")
    assert allocator.allocate("a") == 165536


def test_a_sub_id_file_too_large_to_read_whole_stops_every_claim(tmp_path):
    (tmp_path / "subgid").write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(UidRegistryError, match="subgid is larger than 1048576 bytes"):
        daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path)).allocate("a")


def test_a_claim_file_that_cannot_be_read_keeps_its_uid_taken(tmp_path):
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path))
    (tmp_path / "reg" / str(FIRST_BOX_UID)).write_text("box-a\n")  # not a claim any daemon writes
    assert allocator.allocate("box-b") == FIRST_BOX_UID + 1
    listing = allocator.listing()
    assert list(listing.unreadable) == [FIRST_BOX_UID] and "not one strict JSON object" in listing.unreadable[
        FIRST_BOX_UID]
    assert allocator.release(FIRST_BOX_UID, "box-a") is False and allocator.reclaim_stale() == []


def gone_holder_claims(registry: Path, *boxes: str, records: Path | None = None) -> list[int]:
    """Claims made by another daemon's process that has ended since."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from tkbox_daemon.box.host_ids import HostIds
        from tkbox_daemon.box.uid_claims import ClaimHolder
        from tkbox_daemon.box.uids import UidAllocator
        host = HostIds(subuid=Path("/nonexistent"), subgid=Path("/nonexistent"), account=lambda uid: None,
                       processes=set)
        records = {str(records) if records else None!r}
        holder = ClaimHolder.this_process(daemon="/state/gone", records=Path(records) if records else None)
        allocator = UidAllocator(Path({str(registry)!r}), holder=holder, host=host)
        print(*[allocator.allocate(box) for box in {list(boxes)!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    return [int(uid) for uid in done.stdout.split()]


def test_a_claim_of_a_gone_daemon_is_reclaimed_only_when_provably_stale(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    (records / "kept.json").write_text("{}")
    (records / "aside.json.unreadable").write_text("")
    stale, running, kept, aside = gone_holder_claims(tmp_path / "reg", "stale", "running", "kept", "aside",
                                                     records=records)
    host = quiet_host(tmp_path, running={running})
    alive_other = daemon(tmp_path / "reg", "/state/alive", host)
    alive_uid = alive_other.allocate("alive-box")  # another daemon that still runs: its claim stands
    assert set(alive_other.listing().claims) == {stale, running, kept, aside, alive_uid}
    other = daemon(tmp_path / "reg", "/state/b", host)
    freed = other.reclaim_stale()
    assert [(claim.uid, claim.box) for claim in freed] == [(stale, "stale")]
    assert set(other.listing().claims) == {running, kept, aside, alive_uid}


def test_a_daemons_own_stale_claims_are_not_reclaimed_by_it(tmp_path):
    [uid] = gone_holder_claims(tmp_path / "reg", "mine")
    host = quiet_host(tmp_path)
    restarted = UidAllocator(tmp_path / "reg", holder=ClaimHolder.this_process(daemon="/state/gone"), host=host)
    assert restarted.reclaim_stale() == [] and restarted.claimed() == {uid: "mine"}


def test_when_the_range_is_full_a_stale_claim_is_reclaimed_for_the_new_box(tmp_path):
    [uid] = gone_holder_claims(tmp_path / "reg", "old")
    allocator = daemon(tmp_path / "reg", "/state/b", quiet_host(tmp_path), first=uid, count=1)
    assert allocator.allocate("new") == uid and allocator.owner(uid) == "new"


def test_a_stale_claim_whose_uid_a_process_still_holds_is_never_reclaimed(tmp_path):
    [uid] = gone_holder_claims(tmp_path / "reg", "old")
    allocator = daemon(tmp_path / "reg", "/state/b", quiet_host(tmp_path, running={uid}), first=uid, count=1)
    with pytest.raises(UidsExhausted):
        allocator.allocate("new")
    assert allocator.owner(uid) == "old"


def waiting_for_a_lock() -> set[str]:
    """The pids the kernel lists as blocked on a lock (``/proc/locks`` lines with ``->``)."""
    return {line.split()[5] for line in Path("/proc/locks").read_text().splitlines() if line.split()[1:2] == ["->"]}


def test_a_claim_waits_while_another_process_holds_the_registry_lock(tmp_path):
    import fcntl
    import time

    registry = tmp_path / "reg"
    daemon(registry, "/state/a", quiet_host(tmp_path)).close()
    lock = os.open(registry / LOCK_NAME, os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from pathlib import Path
        from tkbox_daemon.box.host_ids import HostIds
        from tkbox_daemon.box.uids import UidAllocator
        host = HostIds(subuid=Path("/nonexistent"), subgid=Path("/nonexistent"), account=lambda uid: None,
                       processes=set)
        print(UidAllocator(Path({str(registry)!r}), host=host).allocate("waiting"))
    """)], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while str(child.pid) not in waiting_for_a_lock():
            assert child.poll() is None and time.monotonic() < deadline, "the child never waited for the lock"
            time.sleep(0.01)  # noqa: sleep-ok  the kernel lists a blocked flock; there is no event to wait on
        assert [p.name for p in registry.iterdir()] == [LOCK_NAME]  # nothing claimed while the lock is held
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    assert int(child.communicate(timeout=60)[0]) == FIRST_BOX_UID


def test_claims_made_at_once_by_two_processes_never_share_a_uid(tmp_path):
    registry = tmp_path / "reg"
    daemon(registry, "/state/a", quiet_host(tmp_path)).close()
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from tkbox_daemon.box.host_ids import HostIds
        from tkbox_daemon.box.uid_claims import ClaimHolder
        from tkbox_daemon.box.uids import UidAllocator
        host = HostIds(subuid=Path("/nonexistent"), subgid=Path("/nonexistent"), account=lambda uid: None,
                       processes=set)
        name = sys.argv[1]
        allocator = UidAllocator(Path({str(registry)!r}), holder=ClaimHolder.this_process(daemon=name), host=host)
        print("ready", flush=True)
        sys.stdin.readline()
        print(*[allocator.allocate(f"box{{i}}") for i in range(25)])
    """)
    children = [subprocess.Popen([sys.executable, "-c", script, f"/state/{name}"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for name in ("one", "two")]
    for child in children:
        assert child.stdout.readline() == "ready\n"
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    handed = {name: [int(uid) for uid in child.communicate(timeout=120)[0].split()]
              for name, child in zip(("one", "two"), children, strict=True)}
    every = handed["one"] + handed["two"]
    assert len(every) == 50 and len(set(every)) == 50
    for name, uids in handed.items():
        assert {claim_file(registry, uid)["daemon"] for uid in uids} == {f"/state/{name}"}


def test_the_registry_must_be_a_real_directory_no_one_else_may_write(tmp_path):
    (tmp_path / "target").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(UidRegistryError, match="is a symbolic link or not a directory: remove it"):
        UidAllocator(tmp_path / "link")
    (tmp_path / "open").mkdir(mode=0o700)
    (tmp_path / "open").chmod(0o770)
    with pytest.raises(UidRegistryError, match=r"mode 770\): run chown root:root .* && chmod 700"):
        UidAllocator(tmp_path / "open")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could move the registry away and put another in its place
    with pytest.raises(UidRegistryError, match="above the uid registry .* no one else may write"):
        UidAllocator(shared / "reg")
    shared.chmod(0o1777)  # sticky, like /tmp: an entry can be moved only by its owner
    UidAllocator(shared / "reg").close()
    assert stat.S_IMODE(os.stat(shared / "reg").st_mode) == 0o700


@pytest.mark.skipif(not ROOT, reason="gives the registry to another user")
def test_a_registry_of_another_user_is_refused_with_the_fix(tmp_path):
    (tmp_path / "reg").mkdir(mode=0o700)
    os.chown(tmp_path / "reg", 12345, 12345)
    with pytest.raises(UidRegistryError, match="it is uid 12345's, mode 700"):
        UidAllocator(tmp_path / "reg")


def test_a_daemon_that_is_not_root_is_told_the_registry_needs_root(tmp_path, monkeypatch):
    parent = tmp_path / "var"
    parent.mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)

    def refuse(path, mode=0o777):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(UidRegistryError) as refused:
        UidAllocator(parent / "uids")
    assert "cannot be made (Permission denied)" in str(refused.value)
    assert "only root may write their registry: run the daemon as root" in str(refused.value)


def test_box_ids_are_validated(tmp_path):
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path))
    for bad in ("", "../x", "A", "x" * 64, "a b", "a\n"):
        with pytest.raises(ValueError):
            allocator.allocate(bad)


def test_a_pair_is_the_two_lowest_free_uids_read_in_one_pass_and_skips_a_live_process(tmp_path):
    reads = []
    host = HostIds(subuid=tmp_path / "subuid", subgid=tmp_path / "subgid", account={}.get,
                   processes=lambda: reads.append(1) or {FIRST_BOX_UID + 1})
    allocator = daemon(tmp_path / "reg", "/state/a", host)
    assert allocator.allocate_pair("box-a") == (FIRST_BOX_UID, FIRST_BOX_UID + 2) and len(reads) == 1
    assert allocator.claimed() == {FIRST_BOX_UID: "box-a", FIRST_BOX_UID + 2: "box-a"}


def test_a_pair_where_only_one_uid_is_free_claims_neither(tmp_path):
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path), count=3)
    allocator.allocate("box-a")
    allocator.allocate_pair("box-b")
    with pytest.raises(UidsExhausted):
        allocator.allocate_pair("box-c")
    assert sorted(allocator.claimed().values()) == ["box-a", "box-b", "box-b"]
    assert allocator.release(FIRST_BOX_UID, "box-a")
    with pytest.raises(UidsExhausted):
        allocator.allocate_pair("box-c")
    assert "box-c" not in allocator.claimed().values()


def test_a_pair_whose_second_claim_cannot_be_written_leaves_the_first_unclaimed(tmp_path, monkeypatch):
    allocator = daemon(tmp_path / "reg", "/state/a", quiet_host(tmp_path))
    write = UidAllocator._write
    writes = []

    def second_fails(self, claim):
        writes.append(claim.uid)
        if len(writes) == 2:
            raise OSError(28, "No space left on device (test)")
        write(self, claim)

    monkeypatch.setattr(UidAllocator, "_write", second_fails)
    with pytest.raises(OSError, match="No space left"):
        allocator.allocate_pair("box-a")
    assert len(writes) == 2 and allocator.claimed() == {}

"""Box uid allocation: 100000 + n, never 0, never a host account, never twice at once."""

from __future__ import annotations

import pwd

import pytest

from tkbox_daemon.box import uids
from tkbox_daemon.box.uids import FIRST_BOX_UID, UidAllocator, UidsExhausted


def test_uids_are_handed_out_lowest_first_and_released(tmp_path):
    allocator = UidAllocator(tmp_path / "reg")
    first, second = allocator.allocate("box-a"), allocator.allocate("box-b")
    assert (first, second) == (FIRST_BOX_UID, FIRST_BOX_UID + 1)
    assert allocator.owner(first) == "box-a" and allocator.claimed() == {first: "box-a", second: "box-b"}
    assert allocator.release(first, "box-b") is False  # only the holder may release
    assert allocator.release(first, "box-a") is True
    assert allocator.allocate("box-c") == first


def test_two_allocators_on_one_registry_never_share_a_uid(tmp_path):
    one, two = UidAllocator(tmp_path / "reg"), UidAllocator(tmp_path / "reg")
    handed = [one.allocate(f"a{i}") for i in range(5)] + [two.allocate(f"b{i}") for i in range(5)]
    assert len(set(handed)) == 10 and min(handed) >= FIRST_BOX_UID


def test_the_range_is_bounded_and_exhaustion_is_reported(tmp_path):
    allocator = UidAllocator(tmp_path / "reg", first=FIRST_BOX_UID + 10, count=2)
    allocator.allocate("x")
    allocator.allocate("y")
    with pytest.raises(UidsExhausted):
        allocator.allocate("z")
    for first, count in ((0, 10), (FIRST_BOX_UID - 1, 1), (FIRST_BOX_UID, 0), (0xFFFFFFFF, 1)):
        with pytest.raises(ValueError):
            UidAllocator(tmp_path / "other", first=first, count=count)


def test_host_accounts_are_skipped(tmp_path, monkeypatch):
    taken = {FIRST_BOX_UID, FIRST_BOX_UID + 1}

    def getpwuid(uid):
        if uid in taken:
            return pwd.struct_passwd(("someone", "x", uid, uid, "", "/", "/bin/sh"))
        raise KeyError(uid)

    monkeypatch.setattr(uids.pwd, "getpwuid", getpwuid)
    assert UidAllocator(tmp_path / "reg").allocate("box") == FIRST_BOX_UID + 2


def test_box_ids_are_validated(tmp_path):
    allocator = UidAllocator(tmp_path / "reg")
    for bad in ("", "../x", "A", "x" * 64, "a b"):
        with pytest.raises(ValueError):
            allocator.allocate(bad)

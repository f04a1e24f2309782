"""A box's layers on the host (``boxes/layers.py``, ``box/disk.py``, ``box/layout.py``): where they go, that a
layer outside a directory closed to other users is refused, when a disk counts as full, and that a full disk is
reported once per filling. The real disk, mounted, filled and freed, is in ``e2e/test_box_layers_e2e.py``."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon import limits
from tkbox_daemon.box import disk
from tkbox_daemon.box.backend import BoxStartError
from tkbox_daemon.box.disk import DiskError, DiskUsage
from tkbox_daemon.box.layout import check_closed_to_others
from tkbox_daemon.boxes.layers import BoxLayers, FullDiskWatch
from tkbox_daemon.boxes.settings import SettingsError, parse_settings

MIB = limits.MIB


@given(size=st.integers(16 * MIB, 1 << 44), free=st.integers(0, 1 << 44), inodes=st.integers(0, 10**7))
def test_a_disk_is_full_below_its_margin_and_has_room_again_only_well_clear_of_it(size, free, inodes):
    reading = DiskUsage(size=size, free=min(free, size), inodes_free=inodes)
    assert MIB <= reading.margin <= 16 * MIB and reading.margin <= max(size // 256, MIB)
    assert reading.full == (reading.free < reading.margin or inodes == 0)
    if reading.roomy:
        assert not reading.full and reading.free >= 2 * reading.margin


def test_the_margin_covers_what_ext4_still_shows_at_enospc():
    # measured: a 64 MiB disk refused dd with 438 KiB still shown as available
    assert DiskUsage(size=64 * MIB, free=438 * 1024, inodes_free=100).full
    assert not DiskUsage(size=4 << 30, free=17 * MIB, inodes_free=100).full


class ScriptedLayers:
    """Stands in for a box's layers: each reading comes from the script."""

    def __init__(self, readings: list[DiskUsage | None]) -> None:
        self.readings = readings

    def disk_usage(self) -> DiskUsage | None:
        return self.readings.pop(0)


def test_a_full_disk_is_reported_once_per_filling():
    full = DiskUsage(64 * MIB, 100 * 1024, 10)
    almost = DiskUsage(64 * MIB, int(1.5 * MIB), 10)  # above the margin, below twice it: not room again
    roomy = DiskUsage(64 * MIB, 10 * MIB, 10)
    seen: list[DiskUsage] = []
    layers = ScriptedLayers([None, roomy, full, full, almost, full, roomy, full])
    watch = FullDiskWatch(layers, seen.append)  # type: ignore[arg-type]
    for _ in range(8):
        watch.check()
    assert seen == [full, full]  # the first filling, then again only after it had room


def test_running_out_of_inodes_is_a_full_disk_too():
    seen: list[DiskUsage] = []
    FullDiskWatch(ScriptedLayers([DiskUsage(64 * MIB, 30 * MIB, 0)]), seen.append).check()  # type: ignore[arg-type]
    assert len(seen) == 1


def test_the_layers_are_below_a_directory_closed_to_others_and_upper_and_work_share_the_disk(tmp_path):
    workspace = tmp_path / "checkout"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    layers = BoxLayers(tmp_path / "box")
    layers.make_root()
    layers.start(None)
    summary = layers.prepare(workspace, job_uid=os.geteuid(), max_files=10, max_bytes=1 << 20)
    assert summary["files"] == 1 and (layers.base / "a.txt").read_text() == "a\n"
    private = os.lstat(layers.private)
    assert private.st_uid == os.geteuid() and stat.S_IMODE(private.st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(layers.root).st_mode) == 0o711  # bwrap passes through to backend/, no further
    for path in (layers.base, layers.upper, layers.work):
        assert layers.private in path.parents
        check_closed_to_others(path, "layer")
    assert layers.upper.parent == layers.work.parent == layers.disk_dir
    assert layers.disk_usage() is None and not layers.release_disk()  # no disk: nothing bounds the fake backend
    layers.remove()
    assert not layers.root.exists()


def test_a_layer_no_closed_directory_keeps_from_others_is_refused():
    open_dir = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        os.chmod(open_dir, 0o755)  # /tmp (1777) and / above it: every local user may pass
        (open_dir / "upper").mkdir()
        with pytest.raises(BoxStartError, match="closed to other users"):
            check_closed_to_others(open_dir / "upper", "upper_dir")
        os.chmod(open_dir, 0o700)
        check_closed_to_others(open_dir / "upper", "upper_dir")
    finally:
        shutil.rmtree(open_dir)


def test_a_disk_below_the_smallest_is_refused_naming_box_disk(tmp_path):
    with pytest.raises(DiskError, match="box_disk") as refused:
        disk.start_disk(tmp_path / "disk.img", disk.SMALLEST_DISK - 1)
    assert limits.BOX_DISK.how_to_raise in str(refused.value)
    assert not (tmp_path / "disk.img").exists()


def test_a_host_without_room_for_the_disk_is_named_with_the_limit(tmp_path):
    refused = disk._reserve_error(tmp_path / "disk.img", 64 * MIB, OSError(errno.ENOSPC, "No space left"))
    assert "box_disk" in str(refused) and "limits.disk" in str(refused) and str(64 * MIB) in str(refused)
    unsupported = disk._reserve_error(tmp_path / "disk.img", 64 * MIB, OSError(errno.EOPNOTSUPP, "no"))
    assert "fallocate" in str(unsupported) and "TKBOX_BOX_STATE_ROOT" in str(unsupported)


def test_the_disk_setting_takes_a_size_and_refuses_one_too_small(tmp_path):
    settings = parse_settings({"workspace": str(tmp_path), "limits": {"disk": "64M"}}, default_name="b")
    assert settings.limit("disk") == 64 * MIB
    assert parse_settings({"workspace": str(tmp_path)}, default_name="b").limit("disk") == limits.BOX_DISK.default
    with pytest.raises(SettingsError, match="limits.disk") as refused:
        parse_settings({"workspace": str(tmp_path), "limits": {"disk": "8M"}}, default_name="b")
    assert "16M" in str(refused.value)


def test_the_probe_says_what_a_box_disk_needs_here():
    support = disk.probe()
    if support.enforced:
        assert support.method == disk.METHOD and os.geteuid() == 0
        assert shutil.which("mkfs.ext4", path=disk.TOOL_PATH) and os.path.exists("/dev/loop-control")
    else:
        assert support.method == "none" and support.fix


def test_a_set_id_bit_leaves_the_box_neither_in_the_patch_nor_comes_in_with_the_base_copy(tmp_path):
    from tkbox_daemon.box.workspace import build_base
    from tkbox_daemon.patch import compute_patch
    from tkbox_daemon.patch.gitparse import parse_patch

    checkout, upper = tmp_path / "checkout", tmp_path / "upper"
    checkout.mkdir()
    upper.mkdir()
    for name, mode in (("suid", 0o4755), ("sgid", 0o2755), ("sticky", 0o1644)):
        (checkout / name).write_text(f"{name}\n")
        os.chmod(checkout / name, mode)
    build_base(checkout, tmp_path / "base", box_uid=None)
    assert {name: stat.S_IMODE(os.lstat(tmp_path / "base" / name).st_mode) for name in ("suid", "sgid", "sticky")} \
        == {"suid": 0o755, "sgid": 0o755, "sticky": 0o644}
    (upper / "sp").write_bytes(b"\x7fELF made in the box")
    os.chmod(upper / "sp", 0o6755)
    patch = tmp_path / "patch.diff"
    compute_patch(upper, tmp_path / "base", patch)
    text = patch.read_bytes()
    assert b"new file mode 100755\n" in text and b"6755" not in text
    [operation] = parse_patch(text).operations
    assert operation.new_mode == 0o100755


@given(fd=st.integers(0, 2**31 - 1), name=st.binary(max_size=200))
def test_the_loop_configuration_is_the_kernels_struct_with_autoclear_and_the_name_cut_to_fit(fd, name):
    from tkbox_daemon.box.loopdev import LO_FLAGS_AUTOCLEAR, loop_config

    config = loop_config(fd, name)
    assert len(config) == 304  # sizeof(struct loop_config)
    assert int.from_bytes(config[0:4], "little") == fd and config[4:8] == bytes(4)  # fd, block size: kernel's
    assert config[8:60] == bytes(52)  # device, inode, rdevice, offset, size limit (whole file), number, crypto
    assert int.from_bytes(config[60:64], "little") == LO_FLAGS_AUTOCLEAR
    shown = name[:63]
    assert config[64:64 + len(shown)] == shown and config[64 + len(shown):128] == bytes(64 - len(shown))
    assert config[128:] == bytes(176)

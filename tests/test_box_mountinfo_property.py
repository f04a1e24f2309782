"""``box/mountinfo.py`` reads the kernel's mount table strictly: what a line says comes back field for field, a line
of any other shape is an error, and the mounts below a directory come out deepest first."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.box import mountinfo
from tkbox_daemon.box.mountinfo import Mount, MountinfoError

path_bytes = st.lists(st.binary(min_size=1, max_size=12).filter(lambda part: b"/" not in part and b"\0" not in part),
                      min_size=0, max_size=5).map(lambda parts: b"/" + b"/".join(parts))
word = st.binary(min_size=1, max_size=16).filter(lambda value: b"\0" not in value)
option = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_=0123456789", min_size=1, max_size=10).map(str.encode)
optional_field = st.sampled_from([b"shared:1", b"master:7", b"propagate_from:2", b"unbindable"])


@given(st.binary(max_size=64))
def test_unescape_undoes_escape_for_any_path(path):
    escaped = mountinfo.escape(path)
    assert not any(char in escaped for char in (b" ", b"\t", b"\n"))
    assert mountinfo.unescape(escaped) == path


@given(mount_id=st.integers(0, 10**6), parent=st.integers(0, 10**6), major=st.integers(0, 4095),
       minor=st.integers(0, 10**6), root=path_bytes, point=path_bytes, options=st.sets(option, min_size=1, max_size=5),
       optional=st.lists(optional_field, max_size=3), fstype=word, source=word, super_options=option)
def test_a_kernel_line_parses_back_to_its_fields(mount_id, parent, major, minor, root, point, options, optional,
                                                 fstype, source, super_options):
    fields = [str(mount_id).encode(), str(parent).encode(), f"{major}:{minor}".encode(), mountinfo.escape(root),
              mountinfo.escape(point), b",".join(sorted(options)), *optional, b"-", mountinfo.escape(fstype),
              mountinfo.escape(source), super_options]
    mount = mountinfo.parse_line(b" ".join(fields))
    assert mount == Mount(mount_id, parent, major, minor, root, point, frozenset(options), fstype, source,
                          super_options)


@given(st.lists(st.binary(min_size=1, max_size=8).filter(lambda value: b" " not in value and b"\n" not in value
                                                         and value != b"-"), max_size=12))
def test_a_line_without_the_separator_is_refused(fields):
    with pytest.raises(MountinfoError):
        mountinfo.parse_line(b" ".join(fields))


@pytest.mark.parametrize("line", [
    b"36 35 98:0 /mnt1 relative/point rw - ext3 /dev/root rw",  # a mount point is absolute
    b"36 35 98 /mnt1 /mnt2 rw - ext3 /dev/root rw",  # major:minor
    b"x 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw",  # numeric ids
    b"36 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root",  # three fields after the separator
    b"36 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw extra",
])
def test_lines_of_another_shape_are_refused(line):
    with pytest.raises(MountinfoError):
        mountinfo.parse_line(line)


def test_a_namespace_file_mount_and_the_man_page_example_parse():
    example = mountinfo.parse_line(b"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue")
    assert (example.root, example.mount_point, example.fstype, example.options) == (
        b"/mnt1", b"/mnt2", b"ext3", frozenset({b"rw", b"noatime"}))
    netns = mountinfo.parse_line(b"72 71 0:4 net:[4026532186] /run/netns/lab rw - nsfs nsfs rw")
    assert netns.root == b"net:[4026532186]" and netns.mount_point == b"/run/netns/lab"


def test_a_cut_short_table_is_refused():
    with pytest.raises(MountinfoError):
        mountinfo.parse(b"36 35 98:0 / / rw - ext4 /dev/vda rw\n37 36 0:5 / /proc rw - proc")


def _mount(point: bytes) -> Mount:
    return Mount(1, 0, 0, 1, b"/", point, frozenset({b"rw"}), b"tmpfs", b"tmpfs", b"rw")


@given(st.lists(path_bytes, max_size=12), path_bytes)
def test_points_below_are_exactly_those_strictly_under_the_directory_deepest_first(points, directory):
    found = mountinfo.points_below([_mount(point) for point in points], directory)
    prefix = directory.rstrip(b"/") + b"/"
    assert set(found) == {point for point in points if point.startswith(prefix) and point != prefix}
    assert len(found) == len(set(found))
    depths = [point.count(b"/") for point in found]
    assert depths == sorted(depths, reverse=True)


def test_this_process_mount_table_reads():
    mounts = mountinfo.read()
    assert any(mount.mount_point == b"/" for mount in mounts)
    assert mountinfo.read(os.getpid()) == mounts

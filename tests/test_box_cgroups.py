"""cgroups for boxes without a real cgroup file system: the v2 code run against a temporary directory that imitates
a cgroup2 mount (``FakeCgroup2``), the v1 guard files, host detection, and properties of the cgroup file parsers.

The v2 path on a real cgroup2 mount (freeze, kill, populated, removal, real processes) is in
e2e/test_box_cgroups_e2e.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.box import cgroups
from tkbox_daemon.box.backend import BoxError, BoxLimits
from tkbox_daemon.box.cgroups import GuardFiles
from tkbox_daemon.box.cgroups_files import (
    MAX_COUNTER,
    CgroupFileError,
    ProcCgroupLine,
    parse_flat_keyed,
    parse_pids,
    parse_proc_cgroup,
    wait_for_key,
)
from tkbox_daemon.box.cgroups_v1 import BoxCgroupV1, V1Host
from tkbox_daemon.box.cgroups_v2 import cpu_weight
from tkbox_daemon.box.cgroups_v2_tree import V2Host

LOGGER = "tkbox.box.cgroups"


class FakeCgroup2:
    """What the kernel does on a cgroup2 mount, as far as the daemon's code can tell from files: a new group gets
    its interface files, and its ``cgroup.controllers`` are those its parent enabled (the parent's
    ``cgroup.subtree_control`` holds the last ``+name …`` written to it) among those the mount offers."""

    def __init__(self, root: Path, offered: tuple[str, ...]) -> None:
        self.root, self.offered = root, offered
        for name, text in (("cgroup.controllers", " ".join(offered)), ("cgroup.subtree_control", ""),
                           ("cgroup.procs", "")):
            (root / name).write_text(text)

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)
        try:
            asked = (path.parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            asked = []
        controllers = [name for name in self.offered if f"+{name}" in asked]
        files = {"cgroup.controllers": " ".join(controllers), "cgroup.subtree_control": "", "cgroup.procs": "",
                 "cgroup.events": "populated 0\nfrozen 0\n", "cgroup.freeze": "0", "cgroup.kill": "",
                 "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"}
        if "memory" in controllers:
            files |= {"memory.max": "max\n", "memory.swap.max": "max\n", "memory.current": "0\n",
                      "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"}
        if "pids" in controllers:
            files |= {"pids.max": "max\n", "pids.current": "0\n", "pids.events": "max 0\n"}
        if "cpu" in controllers:
            files |= {"cpu.max": "max 100000\n", "cpu.weight": "100\n"}
        for name, text in files.items():
            (path / name).write_text(text)


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(cgroups, "_warned", set())


def test_a_v2_box_gets_each_limit_written_as_the_kernel_takes_it(tmp_path, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ("cpuset", "cpu", "io", "memory", "pids"))
    host = V2Host(tmp_path, own="/", make_dir=kernel.mkdir)
    box = host.create("b1", BoxLimits(memory_bytes=64 << 20, pids_max=7, cpu_shares=256, cpu_quota_us=50_000,
                                      cpu_period_us=20_000))
    group = tmp_path / "tkbox" / "b1"
    assert box.group == group and box.missing == []
    # only the limits' controllers are enabled, at the root and in tkbox/ (which never holds a process)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (tmp_path / "tkbox" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    written = {name: (group / name).read_text() for name in ("memory.max", "memory.swap.max", "pids.max", "cpu.max",
                                                              "cpu.weight")}
    assert written == {"memory.max": str(64 << 20), "memory.swap.max": "0", "pids.max": "7",
                       "cpu.max": "50000 20000", "cpu.weight": str(cpu_weight(256))}
    assert box.procs_files() == [str(group / "cgroup.procs")]
    # a launcher that joined the box goes back to the daemon's group; the guard ends the box with cgroup.kill
    assert box.guard_files() == GuardFiles(leave_to=str(tmp_path / "cgroup.procs"), kill=str(group / "cgroup.kill"))
    assert box.has_freezer and box.stats()["memory_limit_bytes"] == 64 << 20
    assert box.stats()["memory_swap_limit_bytes"] == 64 << 20  # memory plus swap, as v1's memsw


def test_cpu_shares_map_onto_the_v2_weight_range():
    assert (cpu_weight(2), cpu_weight(1024), cpu_weight(262_144)) == (1, 39, 10_000)
    weights = [cpu_weight(shares) for shares in range(2, 262_145, 997)]
    assert weights == sorted(weights) and all(1 <= weight <= 10_000 for weight in weights)


def test_a_controller_the_host_does_not_offer_is_skipped_with_one_warning_naming_the_limit(tmp_path, caplog,
                                                                                        fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ("pids",))
    host = V2Host(tmp_path, own="/", make_dir=kernel.mkdir)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first = host.create("b1", BoxLimits(memory_bytes=1 << 30, pids_max=9))
        second = host.create("b2", BoxLimits(memory_bytes=1 << 30, pids_max=9))
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+pids"
    assert first.missing == second.missing == ["cpu", "memory"]
    assert (tmp_path / "tkbox" / "b2" / "pids.max").read_text() == "9"
    assert not (tmp_path / "tkbox" / "b2" / "memory.max").exists()
    host_warnings = [record.getMessage() for record in caplog.records if "is not offered" in record.getMessage()]
    assert sorted(host_warnings) == [
        f"cgroup v2 controller cpu is not offered at {tmp_path}: CPU shares and quotas are not enforced for boxes "
        "on this host",
        f"cgroup v2 controller memory is not offered at {tmp_path}: memory limits are not enforced for boxes on "
        "this host"]
    assert "box b2: memory limit requested but not enforced" in caplog.text


def test_an_enable_that_fails_is_named_and_the_box_goes_without(tmp_path, caplog, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ("memory", "pids", "cpu"))
    (tmp_path / "cgroup.subtree_control").unlink()
    (tmp_path / "cgroup.subtree_control").mkdir()  # every write to it fails (EISDIR)
    host = V2Host(tmp_path, own="/", make_dir=kernel.mkdir)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        box = host.create("b1", BoxLimits(pids_max=5))
    assert box.missing == ["cpu", "memory", "pids"] and box.has_freezer
    assert f"cannot enable cgroup v2 controller pids in {tmp_path}: Is a directory; process-count limits are " \
           "not enforced for boxes on this host" in caplog.text
    assert host.summary().enforced == () and host.summary().pause == "freezer"


def test_a_delegated_group_keeps_the_daemon_in_a_leaf_and_the_boxes_beside_it(tmp_path, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ("memory", "pids", "cpu"))
    service = tmp_path / "system.slice" / "tkbox.service"
    service.parent.mkdir()
    kernel.mkdir(service)
    (service / "cgroup.controllers").write_text("memory pids cpu")
    (service / "cgroup.procs").write_text("4242\n")  # the daemon, put here by systemd
    os.setxattr(service, "trusted.delegate", b"1")
    host = V2Host(tmp_path, own="/system.slice/tkbox.service", make_dir=kernel.mkdir, self_pid=4242)
    box = host.create("b1", BoxLimits(pids_max=3))
    assert (service / "daemon" / "cgroup.procs").read_text() == "4242"  # out of the way: no internal process
    assert (service / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (tmp_path / "cgroup.subtree_control").read_text() == ""  # the root is not ours to change
    assert box.group == service / "tkbox" / "b1" and (box.group / "pids.max").read_text() == "3"
    assert box.guard_files().leave_to == str(service / "daemon" / "cgroup.procs")
    assert host.leftover("b1").group == box.group and host.summary().detail["delegated"] is True


def test_an_undelegated_daemon_group_puts_the_boxes_under_the_root(tmp_path, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ("memory", "pids", "cpu"))
    service = tmp_path / "tkbox.service"
    kernel.mkdir(service)
    host = V2Host(tmp_path, own="/tkbox.service", make_dir=kernel.mkdir)
    box = host.create("b1", BoxLimits())
    assert box.group == tmp_path / "tkbox" / "b1"
    assert box.guard_files().leave_to == str(service / "cgroup.procs")
    assert not (service / "daemon").exists()


def test_a_live_box_id_is_refused_and_an_empty_leftover_is_found(tmp_path, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ("pids",))
    host = V2Host(tmp_path, own="/", make_dir=kernel.mkdir)
    box = host.create("b1", BoxLimits())
    (box.group / "cgroup.procs").write_text("123\n")
    with pytest.raises(BoxError, match="already has processes: box id in use"):
        host.create("b1", BoxLimits())
    assert host.leftover("b1").pids() == {123}
    assert host.leftover("gone").group is None and host.leftover("gone").remove() is True


def test_v2_stats_are_the_kernels_counters_and_a_garbled_file_is_left_out(tmp_path, caplog, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ("memory", "pids", "cpu"))
    box = V2Host(tmp_path, own="/", make_dir=kernel.mkdir).create("b1", BoxLimits(memory_bytes=1 << 20))
    group = box.group
    (group / "memory.events").write_text("low 0\nhigh 4\nmax 9\noom 3\noom_kill 2\noom_group_kill 0\nsock_x 7\n")
    (group / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 40\n"
                                    "nr_throttled 12\nthrottled_usec 3300\nnr_bursts 0\nburst_usec 0\n")
    (group / "pids.events").write_text("max 5\n")
    (group / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    (group / "cgroup.procs").write_text("10\n11\n")
    stats = box.stats()
    assert {key: stats[key] for key in ("oom_kills", "cpu_usage_ns", "cpu_throttled_periods", "cpu_throttled_ns",
                                        "pids_refused", "frozen", "memory_limit_bytes")} == {
        "oom_kills": 2, "cpu_usage_ns": 1_500_000, "cpu_throttled_periods": 12, "cpu_throttled_ns": 3_300_000,
        "pids_refused": 5, "frozen": True, "memory_limit_bytes": 1 << 20}
    assert box.pids() == {10, 11}
    (group / "memory.events").write_text("oom_kill 2\noom_kill 3\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert "oom_kills" not in box.stats()
    assert "memory.events is not as the kernel writes it (line 2: oom_kill appears twice)" in caplog.text


def test_kill_all_uses_cgroup_kill_unless_it_would_take_the_spared_launcher(tmp_path, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ())
    box = V2Host(tmp_path, own="/", make_dir=kernel.mkdir).create("b1", BoxLimits())
    box.kill_all()
    assert (box.group / "cgroup.kill").read_text() == "1"
    (box.group / "cgroup.kill").write_text("")
    (box.group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    box.kill_all(spare=os.getpid())  # we are the spared one: no cgroup.kill, and no signal to us
    assert (box.group / "cgroup.kill").read_text() == ""


def test_the_v1_guard_thaws_and_leaves_the_freezer_group(tmp_path):
    group = tmp_path / "freezer" / "tkbox" / "b1"
    box = BoxCgroupV1("b1", {"freezer": group, "memory": tmp_path / "memory" / "tkbox" / "b1"})
    files = box.guard_files()
    assert files.thaw == (str(group / "freezer.state"), "THAWED") and files.kill is None
    assert files.leave_to == str(tmp_path / "freezer" / cgroups.own_group_path("freezer").lstrip("/") /
                                 "cgroup.procs")
    assert BoxCgroupV1("b1", {"memory": group}).guard_files() == GuardFiles()


def test_host_detection_and_the_configured_root(tmp_path, monkeypatch):
    assert cgroups.detect_hierarchy(tmp_path) == "none"
    with pytest.raises(ValueError, match="no cgroup file system at"):
        cgroups.configure_root(tmp_path)
    with pytest.raises(ValueError, match="not an absolute path of a directory"):
        cgroups.configure_root(Path("relative"))
    for name in ("memory", "pids"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cgroup.procs").write_text("")
    assert cgroups.detect_hierarchy(tmp_path) == "v1"
    monkeypatch.setattr(cgroups, "_configured_root", None)
    assert cgroups.configure_root(tmp_path) == "v1" and cgroups.current_root() == tmp_path
    host = cgroups.host()
    assert isinstance(host, V1Host) and host.summary().enforced == ("memory", "pids")
    assert host.summary().pause == "signals" and host.summary().not_enforced == ("cpu",)
    cgroups.forget_host(tmp_path)


def test_waiting_for_a_key_returns_once_it_holds_and_gives_up_at_the_deadline(tmp_path):
    events = tmp_path / "cgroup.events"
    events.write_text("populated 0\nfrozen 0\n")
    assert wait_for_key(events, "populated", 0, 60) is True
    assert wait_for_key(events, "frozen", 1, 0.01) is False


async def test_an_empty_box_reports_empty_at_once(tmp_path, fresh_warnings):
    kernel = FakeCgroup2(tmp_path, ())
    box = V2Host(tmp_path, own="/", make_dir=kernel.mkdir).create("b1", BoxLimits())
    assert await asyncio.wait_for(box.wait_empty(60), 60) is True


# ---- parsers --------------------------------------------------------------------------------------------------

keys = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
counters = st.integers(min_value=0, max_value=MAX_COUNTER)
flat_files = st.dictionaries(keys, counters, max_size=12)


def render(values: dict[str, int]) -> str:
    return "".join(f"{key} {value}\n" for key, value in values.items())


@given(flat_files)
def test_a_flat_keyed_file_reads_back_exactly_what_the_kernel_wrote(values):
    assert parse_flat_keyed(render(values)) == values
    assert parse_flat_keyed(render(values).rstrip("\n")) == values  # the last newline is optional


@given(flat_files, st.text(st.characters(blacklist_characters="\n"), max_size=40), st.integers(min_value=0, max_value=12))
def test_a_line_of_any_other_shape_refuses_the_whole_file(values, line, position):
    if parse_line_ok(line):
        return
    lines = render(values).splitlines()
    lines.insert(min(position, len(lines)), line)
    with pytest.raises(CgroupFileError):
        parse_flat_keyed("\n".join(lines) + "\n")


def parse_line_ok(line: str) -> bool:
    try:
        return len(parse_flat_keyed(line + "\n")) == 1
    except CgroupFileError:
        return False


@pytest.mark.parametrize("text", ["oom_kill -1\n", "oom_kill 01\n", "oom_kill  1\n", "oom_kill 1 \n", "\n",
                                  "oom_kill 1\n\n", "OOM 1\n", "oom_kill 18446744073709551616\n", "a 1\na 2\n",
                                  "oom_kill 1\r\n", "oom_kill ١\n"])
def test_what_the_kernel_never_writes_is_refused(text):
    with pytest.raises(CgroupFileError):
        parse_flat_keyed(text)


@given(flat_files, keys.filter(lambda key: key not in ("oom_kill",)), counters, counters)
def test_unknown_keys_never_change_the_count_a_reader_asks_for(values, unknown, unknown_value, kills):
    values = {key: value for key, value in values.items() if key not in (unknown, "oom_kill")}
    with_unknown = {**values, unknown: unknown_value, "oom_kill": kills}
    assert parse_flat_keyed(render(with_unknown))["oom_kill"] == kills


paths = st.lists(st.from_regex(r"[A-Za-z0-9_.@-]{1,12}", fullmatch=True), max_size=5).map(lambda parts: "/" + "/".join(parts))
proc_lines = st.one_of(
    st.builds(ProcCgroupLine, st.just(0), st.just(()), paths),
    st.builds(ProcCgroupLine, st.integers(min_value=1, max_value=99),
              st.lists(st.sampled_from(["cpu", "cpuacct", "memory", "pids", "freezer", "name=systemd"]),
                       min_size=1, max_size=3, unique=True).map(tuple), paths),
)


@given(st.lists(proc_lines, max_size=10))
def test_proc_self_cgroup_reads_back_each_line(lines):
    text = "".join(f"{line.hierarchy}:{','.join(line.controllers)}:{line.path}\n" for line in lines)
    assert parse_proc_cgroup(text) == lines


@pytest.mark.parametrize("text", ["0::relative\n", "x::/\n", "1:cpu,,memory:/\n", "1:cpu\n", "-1::/\n",
                                  "1:cpu:/a\n\n"])
def test_a_proc_cgroup_line_of_another_shape_is_refused(text):
    with pytest.raises(CgroupFileError):
        parse_proc_cgroup(text)


@given(st.sets(st.integers(min_value=1, max_value=4_194_304), max_size=50))
def test_cgroup_procs_reads_back_its_pids(pids):
    assert parse_pids("".join(f"{pid}\n" for pid in sorted(pids))) == pids


@pytest.mark.parametrize("text", ["0\n", "-5\n", "12 13\n", "007\n", "x\n", "99999999999\n"])
def test_cgroup_procs_refuses_what_is_not_a_pid(text):
    with pytest.raises(CgroupFileError):
        parse_pids(text)


def test_the_daemon_refuses_a_cgroup_root_with_no_cgroup_file_system(tmp_path, capsys, monkeypatch):
    from tkbox_daemon.daemon_process import daemon_main

    monkeypatch.setattr(cgroups, "_configured_root", None)
    assert daemon_main(["--cgroup-root", str(tmp_path)]) == 2
    assert f"--cgroup-root: no cgroup file system at {tmp_path}: give the directory where cgroup2 is mounted" \
        in capsys.readouterr().err
    assert cgroups.current_root() == cgroups.CGROUP_ROOT


@pytest.mark.parametrize(("now", "new", "order"), [
    (2 << 30, 4 << 30, ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"]),  # raised: memory+swap first
    (2 << 30, 160 << 20, ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]),  # lowered: memory first
    (2**63 - 4096, 2 << 30, ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]),  # a new group
])
def test_v1_memory_limits_are_written_in_the_order_the_kernel_accepts(tmp_path, monkeypatch, now, new, order):
    """v1 refuses a memory limit above memory+swap's: a box started ahead, taken for a bigger box, gets its
    memory+swap limit raised first (``pool.py``)."""
    from tkbox_daemon.box import cgroups_v1

    group = tmp_path / "memory"
    group.mkdir()
    (group / "memory.memsw.limit_in_bytes").write_text(f"{now}\n")
    written: list[str] = []
    monkeypatch.setattr(cgroups_v1, "write_file", lambda path, value: written.append(Path(path).name))
    cgroups_v1.BoxCgroupV1("b", {"memory": group}).apply(BoxLimits(memory_bytes=new))
    assert written == order

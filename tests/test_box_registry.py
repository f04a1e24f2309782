"""The daemon's box registry (``daemon/boxes/registry.py``): records round-trip, and everything else is refused
with a message naming what is wrong — a torn file, a hand edit, a record of an unknown version, a file for another
box — without ever raising past ``load`` or making up a box."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.box.uids import FIRST_BOX_UID
from tkbox_daemon.boxes.registry import (
    BOX_ID,
    MAX_RECORD_BYTES,
    MAX_TEXT,
    RECORD_FIELDS,
    RECORD_STATES,
    BoxRecord,
    BoxRegistry,
    RecordError,
    RegistryError,
    RunNote,
    UnknownVersion,
    encode_record,
    parse_record,
)
from tkbox_daemon.boxes.settings import LIMIT_FIELDS, BoxSettings, Secret

box_ids = st.from_regex(BOX_ID, fullmatch=True)
names = st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True)
hosts = st.sampled_from(["api.github.com", "pypi.org", "*.example.com", "git.example.com:8080", "!a.example.com",
                         "[2001:db8::1]:443", "192.0.2.1"])
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
times = st.datetimes().map(lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%SZ")).filter(lambda t: len(t) == 20)
secrets = st.builds(Secret, st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True), st.just(""),
                    st.lists(st.sampled_from(["api.github.com", "pypi.org"]), min_size=1, max_size=2).map(tuple))
settings = st.builds(
    BoxSettings, names, texts.map(lambda text: Path("/" + text.replace("\x00", ""))), st.sampled_from(["host", "dir:/x"]),
    st.lists(hosts, max_size=3).map(tuple), st.lists(secrets, max_size=2).map(tuple),
    st.dictionaries(st.sampled_from(sorted(LIMIT_FIELDS)), st.integers(1, 2**40)))


@st.composite
def records(draw: st.DrawFn) -> BoxRecord:
    uid = draw(st.integers(FIRST_BOX_UID, 0xFFFF_FFFD))
    job_uid = draw(st.integers(FIRST_BOX_UID, 0xFFFF_FFFE).filter(lambda value: value != uid))
    return BoxRecord(
        id=draw(box_ids), state=draw(st.sampled_from(RECORD_STATES)), settings=draw(settings),
        created_at=draw(times), expires_at=draw(times), uid=uid, job_uid=job_uid,
        backend=draw(st.sampled_from(["bwrap", "ns", "fake"])), reason=draw(texts), removing=draw(st.booleans()),
        run=draw(st.none() | st.builds(RunNote, st.from_regex(r"run-[0-9a-f]{8}", fullmatch=True), st.booleans())),
        execs_total=draw(st.integers(0, 10**6)), last_event=draw(st.sampled_from(["", "box.stopped", "exec.finished"])))


def sample_record(box_id: str = "0123456789ab", name: str = "demo", state: str = "stopped") -> BoxRecord:
    every_limit = {key: spec.default for key, spec in LIMIT_FIELDS.items()}  # as a record reads back
    return BoxRecord(id=box_id, state=state, settings=BoxSettings(name, Path("/srv/checkout"), limits=every_limit),
                     created_at="2025-03-01T12:00:00Z", expires_at="2025-03-01T14:00:00Z", uid=100_000,
                     job_uid=100_001, backend="bwrap", reason="stopped by the operator", run=RunNote("run-1", False))


@given(records())
def test_every_record_reads_back_as_written(record):
    data = encode_record(record)
    assert parse_record(data, box_id=record.id).to_json() == record.to_json()


@given(records(), st.data())
def test_a_record_cut_anywhere_is_refused_as_torn(record, data):
    encoded = encode_record(record)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(RecordError):
        parse_record(encoded[:cut], box_id=record.id)


@given(st.binary(max_size=2048))
def test_any_bytes_give_a_record_or_a_record_error_never_another_exception(blob):
    try:
        record = parse_record(blob, box_id="0123456789ab")
    except RecordError:
        return
    assert parse_record(encode_record(record), box_id=record.id) == record


@given(records(), st.sampled_from(sorted(RECORD_FIELDS - {"version"})))
def test_a_record_missing_a_field_is_refused_naming_it(record, missing):
    value = record.to_json()
    del value[missing]
    with pytest.raises(RecordError, match=f"missing {missing}"):
        parse_record(json.dumps(value).encode(), box_id=record.id)


SAMPLE = sample_record().to_json()
HAND_EDITS = {
    "state": ({"state": "paused"}, "state: 'paused' is not one of"),
    "uids": ({"uids": {"guest": 0, "job": 100_001}}, "uids: two different box uids"),
    "same uids": ({"uids": {"guest": 100_001, "job": 100_001}}, "uids: two different box uids"),
    "unknown field": ({"extra": 1}, "unknown 'extra'"),
    "id": ({"id": "ffffffffffff"}, "id: the record names box 'ffffffffffff'"),
    "name": ({"settings": {**SAMPLE["settings"], "name": "Bad Name"}}, "settings.name"),
    "workspace": ({"settings": {**SAMPLE["settings"], "workspace": "relative"}}, "settings.workspace"),
    "limit": ({"settings": {**SAMPLE["settings"], "limits": {"memory": -1}}}, "settings.limits"),
    "reason": ({"reason": "x" * (MAX_TEXT + 1)}, "reason: text of at most"),
    "bool version": ({"version": True}, "version: expected the number 1"),
    "run": ({"run": {"id": "run-1"}}, "run: missing closed"),
    "float": ({"execs_total": 1.5}, "not one strict JSON object"),
}


@pytest.mark.parametrize("change, message", HAND_EDITS.values(), ids=HAND_EDITS.keys())
def test_a_hand_edit_is_refused_naming_the_field(change, message):
    with pytest.raises(RecordError) as refused:
        parse_record(json.dumps({**SAMPLE, **change}).encode(), box_id="0123456789ab")
    assert message in str(refused.value)


@given(st.integers(2, 2**40) | st.integers(-(2**40), 0))
def test_a_record_of_another_registry_version_is_an_unknown_version(version):
    value = {**sample_record().to_json(), "version": version, "fields of the future": True}
    with pytest.raises(UnknownVersion, match=f"registry version {version}"):
        parse_record(json.dumps(value).encode(), box_id="0123456789ab")


def test_a_duplicate_key_or_an_oversized_record_is_refused():
    text = encode_record(sample_record()).decode()
    with pytest.raises(RecordError, match="duplicate key"):
        parse_record(text.replace('{"backend"', '{"backend":"ns","backend"', 1).encode(), box_id="0123456789ab")
    with pytest.raises(RecordError, match="larger than"):
        parse_record(b" " * (MAX_RECORD_BYTES + 1), box_id="0123456789ab")


# ---- the registry directory ----------------------------------------------------------------------------------

@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "registry"


def test_save_load_and_forget(directory):
    registry = BoxRegistry(directory)
    first, second = sample_record("0123456789ab", "one"), sample_record("ba9876543210", "two", "running")
    registry.save(second)
    registry.save(first)
    loaded = registry.load()
    assert loaded.records == [first, second]  # in creation order, then by id
    assert loaded.problems == [] and loaded.named_ids == {first.id, second.id}
    modes = (registry.directory.stat().st_mode & 0o777, registry.path(first.id).stat().st_mode & 0o777)
    assert modes == (0o700, 0o600)
    registry.forget(first.id)
    assert [record.id for record in registry.load().records] == [second.id]


def test_a_box_mid_creation_reads_back_as_creating(directory):
    registry = BoxRegistry(directory)
    registry.save(sample_record(state="creating"))
    [record] = registry.load().records
    assert record.state == "creating" and record.uid == 100_000 and record.job_uid == 100_001


def test_a_torn_file_is_set_aside_and_reported_and_the_others_load(directory):
    registry = BoxRegistry(directory)
    good, torn = sample_record("0123456789ab", "good"), sample_record("ba9876543210", "torn")
    registry.save(good)
    registry.path(torn.id).write_bytes(encode_record(torn)[:50])
    loaded = registry.load()
    assert loaded.records == [good] and loaded.named_ids == {good.id, torn.id}
    [problem] = loaded.problems
    assert (problem.file, problem.box_id) == (f"{torn.id}.json", torn.id)
    assert "not one strict JSON object" in problem.error and problem.action.startswith("set aside as")
    assert (directory / f"{torn.id}.json.unreadable").exists() and not registry.path(torn.id).exists()
    again = registry.load()  # set aside once: the next load lists the good box and still names the torn one
    assert again.records == [good] and again.problems == [] and torn.id in again.named_ids


def test_a_record_of_an_unknown_version_is_left_in_place(directory):
    registry = BoxRegistry(directory)
    registry.path("0123456789ab").write_text(json.dumps({"version": 7, "anything": "new"}))
    loaded = registry.load()
    assert loaded.records == [] and loaded.named_ids == {"0123456789ab"}
    assert "left in place" in loaded.problems[0].action and registry.path("0123456789ab").exists()


def test_files_that_are_not_records_of_their_box_are_set_aside(directory):
    registry = BoxRegistry(directory)
    (directory / "not-a-box.json").write_text(encode_record(sample_record()).decode())
    registry.path("ba9876543210").write_bytes(encode_record(sample_record("0123456789ab")))  # another box's
    os.symlink(directory / "elsewhere", registry.path("aaaaaaaaaaaa"))
    (directory / "notes.txt").write_text("not a record, not ours to judge")
    loaded = registry.load()
    assert loaded.records == []
    errors = {problem.file: problem.error for problem in loaded.problems}
    assert errors["not-a-box.json"] == "the file name is not <box id>.json"
    assert errors["ba9876543210.json"].startswith("id: the record names box '0123456789ab'")
    assert "aaaaaaaaaaaa.json" in errors and (directory / "notes.txt").exists()


def test_an_interrupted_write_leaves_the_record_before_it(directory):
    registry = BoxRegistry(directory)
    registry.save(sample_record())
    (directory / ".0123456789ab.json.x1y2.tmp").write_bytes(b'{"version": 1, "id": "01')  # killed mid-write
    loaded = registry.load()
    assert loaded.records == [sample_record()] and loaded.problems == []
    assert [path.name for path in directory.iterdir()] == ["0123456789ab.json"]


def test_a_second_record_of_a_name_is_set_aside(directory):
    registry = BoxRegistry(directory)
    first = sample_record("0123456789ab", "same")
    second = BoxRecord(**{**vars(sample_record("ba9876543210", "same")), "created_at": "2025-03-02T00:00:00Z"})
    registry.save(first)
    registry.save(second)
    loaded = registry.load()
    assert loaded.records == [first] and loaded.problems[0].box_id == second.id
    assert "another box is named same" in loaded.problems[0].error


def test_a_registry_directory_others_can_read_is_refused(directory):
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    with pytest.raises(RegistryError, match="mode 0700"):
        BoxRegistry(directory)


def test_a_second_daemon_on_the_same_registry_is_refused_until_the_first_lets_go(directory):
    first, second = BoxRegistry(directory), BoxRegistry(directory)
    first.lock()
    with pytest.raises(RegistryError, match="another daemon uses the box registry"):
        second.lock()
    first.unlock()
    second.lock()
    second.unlock()

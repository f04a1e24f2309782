"""The safe zip reader: each refusal (with the entry and the limit in its message), and canonical zips read back."""

from __future__ import annotations

import stat
import zlib
from pathlib import Path

import pytest
from evidence_factory import RawMember, raw_zip

from tkbox_daemon.evidence.bundle import zip_bytes
from tkbox_daemon.evidence.zipread import MiB, ZipLimits, ZipRefused, check_name, read_zip


def read(tmp_path: Path, data: bytes, limits: ZipLimits | None = None) -> dict[str, bytes]:
    path = tmp_path / "test.zip"
    path.write_bytes(data)
    return read_zip(path, limits or ZipLimits())


def refused(tmp_path: Path, data: bytes, match: str, limits: ZipLimits | None = None) -> None:
    with pytest.raises(ZipRefused, match=match):
        read(tmp_path, data, limits)


def test_a_canonical_zip_reads_back_in_order(tmp_path: Path) -> None:
    entries = {"manifest.json": b"{}", "records/run.jsonl": b"line\n" * 1000, "empty": b""}
    assert list(read(tmp_path, zip_bytes(entries)).items()) == list(entries.items())


def test_zip_bytes_is_deterministic() -> None:
    entries = {"a": b"x" * 5000, "b/c.json": b"{}"}
    assert zip_bytes(entries) == zip_bytes(dict(entries))


def test_raw_builder_matches_the_reader(tmp_path: Path) -> None:
    data = raw_zip([RawMember(b"a.json", b"[1,2,3]" * 100), RawMember(b"b", b"stored", method=0)])
    assert read(tmp_path, data) == {"a.json": b"[1,2,3]" * 100, "b": b"stored"}


@pytest.mark.parametrize(("name", "match"), [
    (b"../evil", "traversal"),
    (b"records/../../evil", "traversal"),
    (b"./run.jsonl", "traversal"),
    (b"/etc/passwd", "absolute"),
    (b"C:evil", "absolute"),
    (b"records\\run.jsonl", "backslash"),
    (b"run\x00.jsonl", "NUL"),
    (b"records/", "directory"),
    (b"a//b", "empty"),
    (b"caf\xc3\xa9", "ASCII"),
    (b"sp ace", "characters"),
    (b"x" * 256, "longer than 255"),
])
def test_unsafe_names_are_refused(tmp_path: Path, name: bytes, match: str) -> None:
    refused(tmp_path, raw_zip([RawMember(name, b"data")]), match)
    with pytest.raises(ZipRefused):
        check_name(name)


def test_symlinks_are_refused(tmp_path: Path) -> None:
    link = RawMember(b"records/run.jsonl", b"/etc/passwd", method=0, external_attr=(stat.S_IFLNK | 0o777) << 16)
    refused(tmp_path, raw_zip([link]), "'records/run.jsonl': symlink")


@pytest.mark.parametrize("attr", [(stat.S_IFDIR | 0o755) << 16, 0x10, (stat.S_IFIFO | 0o644) << 16])
def test_directories_and_other_kinds_are_refused(tmp_path: Path, attr: int) -> None:
    refused(tmp_path, raw_zip([RawMember(b"thing", b"", method=0, external_attr=attr)]), "directory|regular")


@pytest.mark.parametrize(("first", "second"), [(b"a.json", b"a.json"), (b"A.json", b"a.json")])
def test_duplicate_names_are_refused(tmp_path: Path, first: bytes, second: bytes) -> None:
    refused(tmp_path, raw_zip([RawMember(first, b"1"), RawMember(second, b"2")]), "duplicate")


def test_encrypted_entries_are_refused(tmp_path: Path) -> None:
    refused(tmp_path, raw_zip([RawMember(b"secret", b"x", flags=1)]), "'secret': encrypted")


@pytest.mark.parametrize("method", [1, 9, 12, 14, 93, 99])
def test_compression_other_than_stored_or_deflate_is_refused(tmp_path: Path, method: int) -> None:
    refused(tmp_path, raw_zip([RawMember(b"x", b"data", method=method, payload=b"data")]), f"method {method}")


def test_an_entry_over_64_mib_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    member = RawMember(b"big", b"", size=64 * MiB + 1, payload=zlib.compress(b"", 9)[2:-4])
    refused(tmp_path, raw_zip([member]), "'big': declares .* over the 64 MiB entry limit")


def test_more_than_10000_entries_are_refused(tmp_path: Path) -> None:
    members = [RawMember(f"e{index}".encode(), b"", method=0) for index in range(10_001)]
    refused(tmp_path, raw_zip(members), "10001 entries, over the limit of 10000")


def test_total_size_limit(tmp_path: Path) -> None:
    limits = ZipLimits(max_total_bytes=1000, max_entry_bytes=800)
    members = [RawMember(b"a", b"x" * 600, method=0), RawMember(b"b", b"y" * 600, method=0)]
    refused(tmp_path, raw_zip(members), "'b': declared sizes exceed the 1000 bytes total limit", limits)


def test_a_ratio_bomb_is_refused_before_inflating(tmp_path: Path) -> None:
    refused(tmp_path, raw_zip([RawMember(b"bomb", bytes(8 * MiB))]), "'bomb': compression ratio .*zip bomb")


def test_a_bomb_lying_about_its_size_stops_at_the_declared_size(tmp_path: Path) -> None:
    refused(tmp_path, raw_zip([RawMember(b"bomb", bytes(32 * MiB), size=1000)]), "'bomb': inflates beyond its declared 1000")


def test_an_entry_inflating_to_less_than_declared_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, raw_zip([RawMember(b"short", b"abc" * 100, size=301)]), "'short': inflates to 300")


def test_corrupt_deflate_data_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, raw_zip([RawMember(b"bad", b"hello", payload=b"\xff\xff\xff\xff")]), "'bad': corrupt deflate|does not end")


def test_trailing_bytes_after_the_deflate_stream_are_refused(tmp_path: Path) -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = compressor.compress(b"hello" * 10) + compressor.flush() + b"junk"
    refused(tmp_path, raw_zip([RawMember(b"x", b"hello" * 10, payload=payload)]), "'x': bytes after the end")


def test_crc_mismatch_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, raw_zip([RawMember(b"x", b"hello", method=0, crc=1234)]), "'x': CRC-32")


def test_a_directory_that_disagrees_with_the_local_header_is_refused(tmp_path: Path) -> None:
    data = raw_zip([RawMember(b"aaaa", b"hello", local_name=b"bbbb")])
    refused(tmp_path, data, "'aaaa': the central directory disagrees with the local header")
    good = bytearray(raw_zip([RawMember(b"x", b"hello", method=0)]))
    good[8] = 8  # the local header says deflate, the directory says stored
    refused(tmp_path, bytes(good), "'x': the central directory disagrees with the local header \\(compression method\\)")


@pytest.mark.parametrize("data", [b"", b"PK", b"not a zip at all, just some text" * 10, bytes(100)])
def test_not_a_zip(tmp_path: Path, data: bytes) -> None:
    refused(tmp_path, data, "not a zip")


def test_comments_prefixes_and_trailing_bytes_are_refused(tmp_path: Path) -> None:
    member = RawMember(b"x", b"hello")
    refused(tmp_path, raw_zip([member], comment=b"hi"), "comment|not a zip")
    refused(tmp_path, raw_zip([member]) + b"\x00", "not a zip")
    refused(tmp_path, raw_zip([member], prefix=b"MZ\x90\x00"), "gap or overlap")


def test_non_canonical_fields_are_refused(tmp_path: Path) -> None:
    refused(tmp_path, raw_zip([RawMember(b"x", b"hello", time=0x6000)]), "'x': time is 0x6000, not the canonical 0x0")
    refused(tmp_path, raw_zip([RawMember(b"x", b"hello", external_attr=(stat.S_IFREG | 0o755) << 16)]),
            "'x': external attributes")


def test_zip64_markers_are_refused(tmp_path: Path) -> None:
    data = bytearray(raw_zip([RawMember(b"x", b"hello")]))
    data[-6:-2] = b"\xff\xff\xff\xff"  # central directory offset 0xFFFFFFFF
    refused(tmp_path, bytes(data), "zip64")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ZipRefused, match="cannot read"):
        read_zip(tmp_path / "absent.tkb")


def test_truncated_files_are_refused(tmp_path: Path) -> None:
    data = zip_bytes({"a": b"x" * 1000, "b": b"y" * 1000})
    for cut in (1, 10, 22, 50, len(data) // 2):
        with pytest.raises(ZipRefused):
            read(tmp_path, data[:-cut])

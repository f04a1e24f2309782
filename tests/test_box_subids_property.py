"""Properties of the sub-id file parser and of the allocator that reads it: every id a listed range holds is refused,
every other id in the window that no user holds is handed out, and a line is read one way only."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.box.host_ids import HostIds
from tkbox_daemon.box.subids import ID_LIMIT, IdRanges, SubidRange, parse_line, parse_subids
from tkbox_daemon.box.uid_claims import ClaimHolder
from tkbox_daemon.box.uids import FIRST_BOX_UID, UidAllocator, UidsExhausted

WINDOW = 48  # uids the allocator may hand out in one example
owners = st.one_of(st.from_regex(r"[a-z_][a-z0-9_-]{0,15}", fullmatch=True),
                   st.integers(0, 2**32 - 2).map(str))


@st.composite
def ranges_near(draw, low: int, high: int) -> SubidRange:
    start = draw(st.integers(low, high))
    return SubidRange(draw(owners), start, draw(st.integers(0, 12)), 0)


def render(ranges: list[SubidRange]) -> bytes:
    return b"".join(f"{r.owner}:{r.start}:{r.count}\n".encode() for r in ranges)


def inside(ident: int, ranges: list[SubidRange]) -> bool:
    return any(r.start <= ident < r.start + r.count for r in ranges)


@given(subuid=st.lists(ranges_near(FIRST_BOX_UID - 12, FIRST_BOX_UID + WINDOW), max_size=5),
       subgid=st.lists(ranges_near(FIRST_BOX_UID - 12, FIRST_BOX_UID + WINDOW), max_size=5),
       users=st.sets(st.integers(FIRST_BOX_UID, FIRST_BOX_UID + WINDOW - 1), max_size=6))
def test_the_allocator_hands_out_exactly_the_ids_no_range_and_no_user_holds(subuid, subgid, users):
    with tempfile.TemporaryDirectory() as base:
        root = Path(base)
        (root / "subuid").write_bytes(b"# ranges\n\n" + render(subuid))
        (root / "subgid").write_bytes(render(subgid))
        host = HostIds(subuid=root / "subuid", subgid=root / "subgid",
                       account=lambda uid: "user u" if uid in users else None, processes=set)
        allocator = UidAllocator(root / "reg", holder=ClaimHolder.this_process(daemon="/state/p"), host=host,
                                 first=FIRST_BOX_UID, count=WINDOW)
        handed = []
        try:
            while True:
                handed.append(allocator.allocate("box"))
        except UidsExhausted:
            pass
        finally:
            allocator.close()
    window = range(FIRST_BOX_UID, FIRST_BOX_UID + WINDOW)
    expected = [uid for uid in window if not inside(uid, subuid + subgid) and uid not in users]
    assert handed == expected  # lowest first, each once, none a range holds, none a user has


@given(st.lists(st.one_of(ranges_near(0, ID_LIMIT - 1).filter(lambda r: r.start + r.count <= ID_LIMIT),
                          st.sampled_from([b"", b"# comment: x:1:2", b"   ", b"#"]))))
def test_a_file_of_well_formed_lines_gives_every_range_in_order_and_no_problem(items):
    data = b"".join((f"{i.owner}:{i.start}:{i.count}".encode() if isinstance(i, SubidRange) else i) + b"\n"
                    for i in items)
    parsed = parse_subids(data)
    expected = [i for i in items if isinstance(i, SubidRange)]
    assert parsed.problems == ()
    assert [(r.owner, r.start, r.count) for r in parsed.ranges] == [(r.owner, r.start, r.count) for r in expected]
    lines = [n for n, i in enumerate(items, start=1) if isinstance(i, SubidRange)]
    assert [r.line for r in parsed.ranges] == lines


@given(st.binary(max_size=60))
def test_a_line_is_accepted_only_in_its_one_decimal_spelling(raw):
    raw = raw.replace(b"\n", b"")
    try:
        parsed = parse_line(raw, 1)
    except ValueError:
        return
    assert f"{parsed.owner}:{parsed.start}:{parsed.count}".encode() == raw  # no 0x, octal 0…, sign, space, CR
    assert parsed.start + parsed.count <= ID_LIMIT


@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12))
def test_every_line_that_is_not_blank_or_a_comment_is_a_range_or_a_numbered_problem(lines):
    parsed = parse_subids(b"\n".join(lines) + b"\n")
    content = [n for n, line in enumerate(lines, start=1) if line.strip(b" \t") and not line.startswith(b"#")]
    assert sorted([r.line for r in parsed.ranges] + [p.line for p in parsed.problems]) == content
    for problem in parsed.problems:
        assert problem.reason and problem.text.isprintable()


@given(ranges=st.lists(ranges_near(0, 200), max_size=8), ident=st.integers(0, 260))
def test_merged_ranges_hold_exactly_the_ids_some_range_holds_and_skip_to_the_first_free_one(ranges, ident):
    merged = IdRanges(ranges)
    assert (ident in merged) == inside(ident, ranges)
    after = merged.end_of(ident)
    assert after >= ident and not inside(after, ranges)
    assert all(inside(between, ranges) for between in range(ident, after))


@given(st.sampled_from([b"alice:0x186a0:65536", b"alice:0100000:65536", b"alice:+100000:65536", b"alice: 100000:1",
                        b"alice:100000:65536\r", b"alice:100000", b"alice:100000:65536:x", b":100000:65536",
                        b"al ice:100000:1", b"alice:4294967295:2", b"alice:-1:2", b"\xff:1:1"]))
def test_forms_shadow_could_read_another_way_are_problems_not_ranges(line):
    parsed = parse_subids(b"ok:200000:10\n" + line + b"\n")
    assert [r.start for r in parsed.ranges] == [200000]
    assert [p.line for p in parsed.problems] == [2]

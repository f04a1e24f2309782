"""C2SP signed-note checkpoints: round trip, wrong key, double signatures, unknown signers, malformed notes."""

from __future__ import annotations

import base64

import pytest
from evidence_factory import seeded_key

from tkbox_daemon.evidence import note

ORIGIN = "tkbox.local/00112233445566778899aabbccddeeff"
ROOT = bytes(range(32))


def signed(size: int = 7, *, key_label: str = "log", name: str = ORIGIN) -> bytes:
    return note.sign_checkpoint(note.Checkpoint(ORIGIN, size, ROOT), name, seeded_key(key_label))


def pinned(key_label: str = "log", name: str = ORIGIN) -> note.VerifierKey:
    return note.VerifierKey.parse(note.vkey_for(name, seeded_key(key_label).public_key()))


def signature_line(text: bytes) -> bytes:
    return text.split(b"\n\n", 1)[1]


def test_sign_then_open_round_trip() -> None:
    text = signed(7)
    assert text.startswith(f"{ORIGIN}\n7\n{base64.b64encode(ROOT).decode()}\n\n\u2014 {ORIGIN} ".encode())
    assert note.open_checkpoint(text, pinned()) == note.Checkpoint(ORIGIN, 7, ROOT)


def test_vkey_round_trip_even_when_the_key_base64_has_a_plus() -> None:
    for label in ("log", "a", "b", "c", "d", "e", "f", "g"):
        public = seeded_key(label).public_key()
        vkey = note.vkey_for(ORIGIN, public)
        parsed = note.VerifierKey.parse(vkey)
        assert note.vkey_for(parsed.name, parsed.public) == vkey


def test_a_note_signed_by_another_key_is_refused() -> None:
    with pytest.raises(note.NoteError, match="not signed exactly once"):
        note.open_checkpoint(signed(key_label="other"), pinned())


def test_a_forged_signature_by_the_pinned_key_id_is_refused() -> None:
    text = signed()
    body, line = text.split(b"\n\n", 1)
    name, encoded = line[len("\u2014 ".encode()):].rstrip(b"\n").split(b" ")
    blob = bytearray(base64.b64decode(encoded))
    blob[10] ^= 1
    forged = body + b"\n\n" + "\u2014 ".encode() + name + b" " + base64.b64encode(bytes(blob)) + b"\n"
    with pytest.raises(note.NoteError, match="does not verify"):
        note.open_checkpoint(forged, pinned())


def test_two_signatures_by_the_pinned_key_are_refused() -> None:
    text = signed()
    with pytest.raises(note.NoteError, match="exactly once"):
        note.open_checkpoint(text + signature_line(text), pinned())


def test_unknown_signer_lines_are_ignored() -> None:
    text = signed()
    other = note.sign_checkpoint(note.Checkpoint(ORIGIN, 7, ROOT), "witness.example/w1", seeded_key("witness"))
    assert note.open_checkpoint(text + signature_line(other), pinned()).size == 7
    assert note.open_checkpoint(other.split(b"\n\n")[0] + b"\n\n" + signature_line(other) + signature_line(text),
                                pinned()).size == 7


def test_a_changed_body_does_not_verify() -> None:
    text = signed(7).replace(b"\n7\n", b"\n8\n", 1)
    with pytest.raises(note.NoteError):
        note.open_checkpoint(text, pinned())


def test_origin_must_be_the_pinned_key_name() -> None:
    body = note.Checkpoint("tkbox.local/other", 7, ROOT)
    text = note.sign_checkpoint(body, ORIGIN, seeded_key("log"))
    with pytest.raises(note.NoteError, match="origin"):
        note.open_checkpoint(text, pinned())


def test_non_canonical_signature_base64_is_refused() -> None:
    """68 bytes of key id and signature leave two spare bits in the last base64 character."""
    text = signed()
    line = signature_line(text).rstrip(b"\n")
    encoded = line.rsplit(b" ", 1)[1]
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(encoded[-2:-1])
    tweaked = encoded[:-2] + alphabet[last ^ 1:(last ^ 1) + 1] + b"="
    assert base64.b64decode(tweaked) == base64.b64decode(encoded)
    with pytest.raises(note.NoteError, match="canonical"):
        note.open_checkpoint(text.replace(encoded, tweaked), pinned())


@pytest.mark.parametrize("mutate", [
    lambda t: t.replace(b"\n\n", b"\n"),  # no blank line
    lambda t: t[:-1],  # no final newline
    lambda t: t.replace(b"\n", b"\r\n"),  # CRLF
    lambda t: t.replace("\u2014 ".encode(), b"- "),  # not an em dash
    lambda t: t.rstrip(b"\n") + b"!!!\n",  # signature not base64
    lambda t: t.split(b"\n\n")[0] + b"\n\n",  # no signature lines
    lambda t: t.split(b"\n\n")[0] + b"\n\n" + "\u2014 x AAAA\n".encode(),  # signature too short
    lambda t: b"\xff" + t,  # not UTF-8
    lambda t: t.replace(b"\n7\n", b"\n07\n"),  # size with a leading zero
    lambda t: t.replace(b"\n7\n", "\n\u0667\n".encode()),  # a non-ASCII digit
    lambda t: t + signature_line(t) * 64,  # more than 64 signature lines
])
def test_malformed_notes_are_refused(mutate) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(note.NoteError):
        note.open_checkpoint(mutate(signed()), pinned())


def test_notes_larger_than_1_mib_are_refused() -> None:
    with pytest.raises(note.NoteError, match="1 MiB"):
        note.open_checkpoint(signed() + b"x" * (1 << 20), pinned())


@pytest.mark.parametrize("vkey", [
    "name+00000000",  # two parts
    "na me+00000000+AQ==",  # space in the name
    "name+zz+AQ==",  # id not hex
    "name+00000000+AQ",  # key not base64
    "name+00000000+" + base64.b64encode(b"\x02" + bytes(32)).decode(),  # not type 0x01
])
def test_malformed_vkeys_are_refused(vkey: str) -> None:
    with pytest.raises(note.NoteError):
        note.VerifierKey.parse(vkey)


def test_vkey_whose_id_does_not_match_its_key_is_refused() -> None:
    vkey = note.vkey_for(ORIGIN, seeded_key("log").public_key())
    name, _, rest = vkey.partition("+")
    with pytest.raises(note.NoteError, match="does not match"):
        note.VerifierKey.parse(f"{name}+00000000+{rest.partition('+')[2]}")

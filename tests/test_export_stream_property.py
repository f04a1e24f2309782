"""Property of the daemon's reading of a signer export (``SignerExport.chunks``): whatever the signer's answers, the
daemon passes on the complete announced bundle only when every byte is the announced one; otherwise it raises
``ExportBroken`` having passed on less than the whole (so the client's body is cut short, never complete)."""

from __future__ import annotations

import asyncio
import base64
import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.boxes.run_export import ExportBroken, SignerExport

MUTATIONS = ("none", "flip", "extra", "short", "offset", "base64", "eof_early", "no_eof", "shape")


class ScriptedSigner:
    """Answers ``export_read`` from ``chunks`` (a list of reply dicts), in order."""

    def __init__(self, replies: list[dict]) -> None:
        self.replies = replies
        self.calls = 0

    async def call(self, method: str, **fields: object) -> dict:
        assert method == "export_read"
        if self.calls >= len(self.replies):
            return {"offset": fields["offset"], "data": "", "eof": False}
        reply = self.replies[self.calls]
        self.calls += 1
        return reply


def _replies(bundle: bytes, cuts: list[int], mutation: str, where: int) -> list[dict]:
    bounds = sorted({0, len(bundle), *(c % (len(bundle) + 1) for c in cuts)})
    pieces = [bytearray(bundle[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)] or [bytearray()]
    index = where % len(pieces)
    if mutation == "flip" and pieces[index]:
        pieces[index][0] ^= 0x80
    elif mutation == "extra":
        pieces[index] += b"!"
    elif mutation == "short" and pieces[-1]:
        pieces[-1] = pieces[-1][:-1]
    replies, offset = [], 0
    for number, piece in enumerate(pieces):
        reply = {"offset": offset, "data": base64.b64encode(bytes(piece)).decode(), "eof": number == len(pieces) - 1}
        offset += len(piece)
        replies.append(reply)
    target = replies[index]
    if mutation == "offset":
        target["offset"] += 1
    elif mutation == "base64":
        target["data"] = target["data"] + "*"
    elif mutation == "eof_early" and index < len(replies) - 1:
        target["eof"] = True
    elif mutation == "no_eof":
        replies[-1]["eof"] = False
    elif mutation == "shape":
        target["eof"] = "yes"
    return replies


async def _read(export: SignerExport) -> tuple[bytes, Exception | None]:
    passed = bytearray()
    try:
        async for chunk in export.chunks():
            passed += chunk
    except ExportBroken as broken:
        return bytes(passed), broken
    return bytes(passed), None


@settings(max_examples=300)
@given(bundle=st.binary(max_size=300), cuts=st.lists(st.integers(0, 400), max_size=6),
       mutation=st.sampled_from(MUTATIONS), where=st.integers(0, 10))
def test_the_whole_bundle_is_passed_on_only_when_it_is_the_announced_one(bundle, cuts, mutation, where):
    replies = _replies(bundle, cuts, mutation, where)
    export = SignerExport(ScriptedSigner(replies), "exp-" + "0" * 32, "run-1", len(bundle),  # type: ignore[arg-type]
                          "sha256:" + hashlib.sha256(bundle).hexdigest())
    passed, broken = asyncio.run(_read(export))
    if broken is None:
        assert passed == bundle
    else:
        assert len(passed) < len(bundle) or not bundle
        assert passed == bundle[:len(passed)] or mutation in ("flip", "extra")
    if mutation == "none":
        assert broken is None

"""Properties of the export methods: the closed schemas accept exactly their shapes; a read answers exactly the
bytes of the bundle at its offset, or a known refusal; an export opens only for the owner of a closed run; and no
export call ever adds a record to the log."""

from __future__ import annotations

import asyncio
import base64
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.policy import PolicyContext, load_pack
from tkbox_daemon.signer import exports
from tkbox_daemon.signer.idempotency import new_request_id
from tkbox_daemon.signer.keys import load_or_create
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.rpc_schema import ERROR_CODES, SchemaError, validate
from tkbox_daemon.signer.service import SignerService
from tkbox_daemon.signer.store import LogStore

EXPORT_ID = re.compile(r"exp-[0-9a-f]{32}")
OWNER = "uid:0"


@pytest.fixture(scope="module")
def signer(tmp_path_factory):
    """A signer with one open and one closed run of OWNER, and one export of the closed run open."""
    base = tmp_path_factory.mktemp("signer-export-property")
    paths = SignerPaths(base / "data", base / "run")
    paths.ensure()
    loop = asyncio.new_event_loop()
    keys = load_or_create(paths.keys_dir)
    pack = load_pack("default", PolicyContext(str(paths.data_dir), str(paths.runtime_dir), os.getpid()))
    store = LogStore(paths.store_dir, keys, durable=False)
    service = SignerService(keys, store, pack)

    def call(request, identity=OWNER):
        return loop.run_until_complete(service.handle(identity, request))

    loop.run_until_complete(service.start())
    runs = {}
    for name in ("open", "closed"):
        reply = call({"method": "register_run", "request_id": new_request_id(), "agent": {"name": "p"}})
        runs[name] = reply["run_id"]
        if name == "closed":
            call({"method": "close_run", "request_id": new_request_id(), "run_id": reply["run_id"],
                  "run_token": reply["run_token"]})
    opened = call({"method": "export_open", "run_id": runs["closed"]})
    bundle = (paths.store_dir / "exports" / f"{opened['export_id']}.tkb").read_bytes()
    yield call, service, runs, opened, bundle
    store.close()
    loop.close()


export_ids = st.one_of(st.text(max_size=40), st.from_regex(EXPORT_ID, fullmatch=True),
                       st.integers(), st.none())
offsets = st.one_of(st.integers(-(2**60), 2**60), st.booleans(), st.text(max_size=5), st.none())


@settings(max_examples=300)
@given(export_id=export_ids, offset=offsets, extra=st.dictionaries(st.sampled_from(["run_id", "x", "size"]),
                                                                   st.integers(), max_size=1))
def test_the_export_read_schema_accepts_exactly_an_export_id_and_an_offset(export_id, offset, extra):
    request = {"method": "export_read", "export_id": export_id, "offset": offset, **extra}
    shaped = (isinstance(export_id, str) and EXPORT_ID.fullmatch(export_id) is not None
              and type(offset) is int and 0 <= offset <= 2**53 - 1 and not extra)
    try:
        validate(request)
    except SchemaError as exc:
        assert not shaped and "export_read" in str(exc)
    else:
        assert shaped


@settings(max_examples=300)
@given(data=st.data())
def test_a_read_answers_the_bundles_bytes_at_its_offset_or_a_known_refusal(signer, data):
    call, service, _, opened, bundle = signer
    export_id = data.draw(st.one_of(st.just(opened["export_id"]), export_ids), label="export_id")
    offset = data.draw(st.one_of(st.integers(0, len(bundle) + 2), st.just(len(bundle)), offsets), label="offset")
    identity = data.draw(st.sampled_from([OWNER, "uid:1000"]), label="identity")
    before = service.store.size
    reply = call({"method": "export_read", "export_id": export_id, "offset": offset}, identity)
    assert service.store.size == before
    if "error" in reply:
        assert reply["error"]["code"] in ERROR_CODES and reply["error"]["message"]
        return
    assert identity == OWNER and export_id == opened["export_id"]
    chunk = base64.b64decode(reply["data"], validate=True)
    assert chunk == bundle[offset:offset + exports.EXPORT_CHUNK]  # all of it from there, up to one chunk
    assert reply["offset"] == offset and reply["eof"] == (offset + len(chunk) == len(bundle))


@settings(max_examples=100)
@given(run=st.one_of(st.sampled_from(["open", "closed"]), st.text(min_size=1, max_size=20)),
       identity=st.sampled_from([OWNER, "uid:1000", "uid:4294967295"]))
def test_an_export_opens_only_for_the_owner_of_a_closed_run_and_records_nothing(signer, run, identity):
    call, service, runs, _, _ = signer
    run_id = runs.get(run, run)
    before = service.store.size
    reply = call({"method": "export_open", "run_id": run_id}, identity)
    assert service.store.size == before
    if "error" in reply:
        assert reply["error"]["code"] in ERROR_CODES
        assert not (run_id == runs["closed"] and identity == OWNER) or reply["error"]["code"] == "quota_exceeded"
        return
    assert run_id == runs["closed"] and identity == OWNER
    assert EXPORT_ID.fullmatch(reply["export_id"]) and reply["sha256"].startswith("sha256:")
    call({"method": "export_done", "export_id": reply["export_id"]})

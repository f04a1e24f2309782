"""Property: whatever a caller sends, the signer answers with one reply object — a result or a known error — and
never records anything for a request it refused."""

from __future__ import annotations

import asyncio
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon import strictjson
from tkbox_daemon.policy import PolicyContext, load_pack
from tkbox_daemon.signer.keys import load_or_create
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.rpc_schema import ERROR_CODES, METHODS
from tkbox_daemon.signer.service import SignerService
from tkbox_daemon.signer.store import LogStore


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    base = tmp_path_factory.mktemp("signer-property")
    paths = SignerPaths(base / "data", base / "run")
    paths.ensure()
    loop = asyncio.new_event_loop()
    keys = load_or_create(paths.keys_dir)
    pack = load_pack("default", PolicyContext(str(paths.data_dir), str(paths.runtime_dir), os.getpid()))
    store = LogStore(paths.store_dir, keys, durable=False)
    signer = SignerService(keys, store, pack)
    loop.run_until_complete(signer.start())
    run = loop.run_until_complete(signer.handle("uid:0", {"method": "register_run", "request_id": "r0",
                                                          "agent": {"name": "p"}}))
    yield loop, signer, {"run_id": run["run_id"], "run_token": run["run_token"]}
    store.close()
    loop.close()


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                                                  max_size=3),
                           max_leaves=10)
field_names = st.sampled_from(sorted({f for m in METHODS.values() for f in (*m.required, *m.optional)}))


def requests(run_fields):
    return st.fixed_dictionaries(
        {"method": st.one_of(st.sampled_from(sorted(METHODS)), st.text(max_size=10))},
        optional={**{name: json_values for name in ("tool", "args", "value", "agent", "decision_id", "status")},
                  "request_id": st.text(max_size=12), "run_id": st.just(run_fields["run_id"]),
                  "run_token": st.just(run_fields["run_token"]), "bogus": json_values},
    )


@settings(max_examples=300)
@given(data=st.data())
def test_any_request_gets_one_reply_and_a_refusal_records_nothing(service, data):
    loop, signer, run_fields = service
    request = data.draw(requests(run_fields))
    before = signer.store.size
    reply = loop.run_until_complete(signer.handle("uid:0", request))
    assert isinstance(reply, dict)
    strictjson.canonical(reply)  # the reply is always encodable JSON
    if "error" in reply:
        assert reply["error"]["code"] in ERROR_CODES and reply["error"]["message"]
        assert signer.store.size == before
    else:
        assert request.get("method") in METHODS


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_any_line_is_a_strict_object_or_a_clean_refusal(line):
    try:
        value = strictjson.loads_object(line, max_bytes=1 << 20)
    except strictjson.StrictJSONError as exc:
        assert str(exc)
    else:
        assert isinstance(value, dict)
        assert strictjson.loads_object(strictjson.canonical(value), max_bytes=1 << 20) == value

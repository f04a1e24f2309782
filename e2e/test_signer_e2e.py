"""The real signer process through the real ``tkbox`` command: lifecycle, restarts, uids, broken stores."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from e2e.signer_process import tkbox, tkbox_json
from tkbox_daemon.signer.client import SignerClient, SignerError, new_request_id
from tkbox_daemon.signer.paths import SignerPaths

pytestmark = pytest.mark.e2e


@pytest.fixture
def signer():
    """A dev signer started with ``tkbox signer up`` in this test's own directories; stopped afterwards."""
    info = tkbox_json("signer", "up")
    assert info["started"] is True
    yield SignerPaths.from_env()
    tkbox("signer", "down", check=False)


def _register(client: SignerClient) -> dict[str, str]:
    run = client.call("register_run", request_id=new_request_id(), agent={"name": "e2e"})
    return {"run_id": run["run_id"], "run_token": run["run_token"]}


def _decide(client: SignerClient, run: dict[str, str], command: str) -> dict:
    return client.call("decide", request_id=new_request_id(), **run, tool="Bash", args={"command": command})


def test_up_reuses_a_running_signer_status_reports_it_and_down_stops_it(signer):
    again = tkbox_json("signer", "up")
    assert again["started"] is False
    status = tkbox_json("signer", "status")
    assert status["store"]["state"] == "ok" and status["assurance"] == "dev" and status["records"] >= 2
    assert status["keys"]["log_vkey"].startswith(status["origin"] + "+")
    text = tkbox("signer", "status").stdout
    assert "assurance  dev" in text
    stopped = tkbox_json("signer", "down")
    assert stopped["stopped"] is True
    assert not signer.socket.exists()
    assert tkbox("signer", "status", check=False).returncode != 0


def test_the_data_and_runtime_directories_and_keys_are_private(signer):
    for directory in (signer.data_dir, signer.runtime_dir, signer.keys_dir):
        assert (directory.stat().st_mode & 0o777) == 0o700
    for key in ("record.key", "log.key", "run_token.key", "salt.key"):
        assert ((signer.keys_dir / key).stat().st_mode & 0o777) == 0o600
    assert (signer.socket.stat().st_mode & 0o777) == 0o600


def test_a_run_recorded_across_a_signer_restart_still_verifies(signer, tmp_path):
    with SignerClient(signer.socket) as client:
        run = _register(client)
        first = _decide(client, run, "git status")
        client.call("complete", request_id=new_request_id(), **run, decision_id=first["decision_id"], status="ok",
                    exit_code=0)
    tkbox("signer", "down")
    tkbox("signer", "up")
    with SignerClient(signer.socket) as client:
        second = _decide(client, run, "pytest -q")
        assert second["decision"] == "allow"
        client.call("complete", request_id=new_request_id(), **run, decision_id=second["decision_id"], status="ok",
                    exit_code=0)
        client.call("close_run", request_id=new_request_id(), **run)
    bundle, trust = tmp_path / "run.tkb", tmp_path / "run.trust.json"
    tkbox("signer", "export", "--run", run["run_id"], "-o", str(bundle))
    tkbox("signer", "trust", "-o", str(trust))
    verified = tkbox("verify", str(bundle), "--trust", str(trust))
    assert "Integrity: VERIFIED." in verified.stdout
    assert "Assurance: dev" in verified.stdout


def test_a_retry_after_a_restart_gets_the_original_answer(signer):
    with SignerClient(signer.socket) as client:
        run = _register(client)
        rid = new_request_id()
        first = client.call("decide", request_id=rid, **run, tool="Bash", args={"command": "ls"})
    tkbox("signer", "down")
    tkbox("signer", "up")
    with SignerClient(signer.socket) as client:
        again = client.call("decide", request_id=rid, **run, tool="Bash", args={"command": "ls"})
    assert again == first


def test_two_clients_at_once(signer):
    results: dict[str, list[int]] = {}

    def work(tag: str) -> None:
        with SignerClient(signer.socket) as client:
            run = _register(client)
            results[tag] = [_decide(client, run, f"echo {tag} {n}")["run_seq"] for n in range(40)]

    threads = [threading.Thread(target=work, args=(tag,)) for tag in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {"a": list(range(1, 41)), "b": list(range(1, 41))}


CONNECT_AS_OTHER_UID = """
import json, socket, sys
sock = socket.socket(socket.AF_UNIX)
try:
    sock.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect_error": exc.errno}))
    raise SystemExit(0)
try:
    sock.sendall(b'{"method":"hello"}\\n')
except BrokenPipeError:
    pass  # a refused caller is answered at once and the connection closed
reply = sock.makefile("rb").readline()
print(json.dumps({"reply": json.loads(reply) if reply else None}))
"""


def _as_nobody(signer: SignerPaths, *extra: str) -> dict:
    import json

    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *extra,
               sys.executable, "-I", "-c", CONNECT_AS_OTHER_UID, str(signer.socket)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_client_of_another_uid_cannot_open_the_socket(signer):
    import errno

    assert _as_nobody(signer) == {"connect_error": errno.EACCES}


def test_a_client_of_another_uid_that_gets_past_the_file_modes_is_refused_by_peer_credentials(signer):
    # CAP_DAC_OVERRIDE lets uid 65534 past the 0700 directory and the 0600 socket: the signer itself must refuse.
    outcome = _as_nobody(signer, "--inh-caps=+dac_override", "--ambient-caps=+dac_override")
    assert outcome["reply"]["error"]["code"] == "unauthenticated"


@pytest.fixture
def small_store(tmp_path):
    """The signer's store directory on a 256 KiB tmpfs that the test can fill or make read-only."""
    paths = SignerPaths.from_env()
    paths.ensure()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(paths.store_dir)], check=True)
    yield paths
    tkbox("signer", "down", check=False)
    subprocess.run(["umount", "-l", str(paths.store_dir)], check=False)


def test_a_full_store_makes_decide_unavailable_never_allow(small_store):
    tkbox("signer", "up")
    with SignerClient(small_store.socket) as client:
        run = _register(client)
        assert _decide(client, run, "ls")["decision"] == "allow"
        filler = small_store.store_dir / "filler"
        with open(filler, "wb") as handle:
            try:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
            except OSError:
                pass
        with pytest.raises(SignerError) as refused:
            _decide(client, run, "ls")
        assert refused.value.code == "unavailable"
        filler.unlink()
        with pytest.raises(SignerError) as still:
            _decide(client, run, "ls")  # once failed, the store stays failed until the signer restarts
        assert still.value.code == "unavailable"
    status = tkbox_json("signer", "status", check=False)
    assert status["store"]["state"] == "failed" and "No space" in status["store"]["error"]


def test_a_read_only_store_makes_decide_unavailable_never_allow(small_store):
    tkbox("signer", "up")
    with SignerClient(small_store.socket) as client:
        run = _register(client)
    tkbox("signer", "down")
    subprocess.run(["mount", "-o", "remount,ro", str(small_store.store_dir)], check=True)
    tkbox("signer", "up")
    with SignerClient(small_store.socket) as client:
        with pytest.raises(SignerError) as refused:
            _decide(client, run, "ls")
        assert refused.value.code == "unavailable"
    status = tkbox_json("signer", "status", check=False)
    assert status["store"]["state"] == "failed" and "Read-only" in status["store"]["error"]


def test_a_torn_tail_is_set_aside_and_reported_at_start(signer):
    with SignerClient(signer.socket) as client:
        run = _register(client)
        _decide(client, run, "ls")
    tkbox("signer", "down")
    log = signer.store_dir / "log.jsonl"
    size_before = log.stat().st_size
    with open(log, "ab") as handle:
        handle.write(b'{"v":1,"event":{"half a rec')
    tkbox("signer", "up")
    status = tkbox_json("signer", "status")
    assert status["store"]["recovered"]["torn_bytes"] == len(b'{"v":1,"event":{"half a rec')
    torn = signer.store_dir / status["store"]["recovered"]["torn_file"]
    assert torn.read_bytes() == b'{"v":1,"event":{"half a rec'
    assert log.stat().st_size > size_before  # the log continues after the tail was set aside
    with SignerClient(signer.socket) as client:
        assert _decide(client, run, "pwd")["decision"] == "allow"


def test_a_damaged_record_before_the_tail_stops_the_signer_with_a_clear_message(signer):
    with SignerClient(signer.socket) as client:
        run = _register(client)
        _decide(client, run, "ls")
    tkbox("signer", "down")
    log = signer.store_dir / "log.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"type":"signer.started"', b'"type":"signer.startex"')
    log.write_bytes(b"\n".join(lines))
    result = tkbox("signer", "up", check=False)
    assert result.returncode != 0
    assert "damaged" in result.stderr


def test_the_signer_refuses_unsafe_directories(tmp_path):
    data = tmp_path / "open-data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    env = {**os.environ, "TKBOX_SIGNER_DATA_DIR": str(data)}
    result = tkbox("signer", "up", env=env, check=False)
    assert result.returncode == 2 and "chmod 700" in result.stderr


def test_the_demo_records_exports_and_verifies(tmp_path):
    result = tkbox("demo", "--out", str(tmp_path / "demo"))
    assert "Integrity: VERIFIED." in result.stdout
    assert "TK-D007" in result.stdout
    assert Path(tmp_path / "demo" / "run.tkb").exists()
    tkbox("signer", "down")

"""The generated /etc of a box: exactly the contract's files, loopback-only names, no DNS, the host's CA bundle."""

from __future__ import annotations

import os
import stat

import pytest

from tkbox_daemon.box import etcgen
from tkbox_daemon.box.etcgen import generate_etc

CONTRACT_FILES = {"passwd", "group", "hosts", "hostname", "nsswitch.conf", "resolv.conf",
                  "ssl/certs/ca-certificates.crt"}


def test_the_contract_files_are_written_read_only_for_the_box(tmp_path):
    summary = generate_etc(tmp_path / "etc", uses_host_usr=False)
    etc = tmp_path / "etc"
    assert set(summary["files"]) == CONTRACT_FILES
    for relative in CONTRACT_FILES:
        info = (etc / relative).lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o644
        assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(etc.stat().st_mode) == 0o755


def test_users_names_and_resolution(tmp_path):
    generate_etc(tmp_path / "etc", hostname="box", uses_host_usr=False)
    etc = tmp_path / "etc"
    passwd = [line.split(":") for line in (etc / "passwd").read_text().splitlines()]
    assert [(entry[0], entry[2], entry[5]) for entry in passwd] == [
        ("root", "0", "/root"), ("box", "1000", "/home/box"), ("nobody", "65534", "/nonexistent")]
    assert "box:x:1000:" in (etc / "group").read_text()
    addresses = {line.split()[0] for line in (etc / "hosts").read_text().splitlines() if line.strip()}
    assert addresses == {"127.0.0.1", "::1"}
    assert (etc / "hostname").read_text() == "box\n"
    assert (etc / "resolv.conf").read_text() == ""
    assert "hosts: files\n" in (etc / "nsswitch.conf").read_text()
    assert "dns" not in (etc / "nsswitch.conf").read_text()


def test_the_ca_bundle_is_the_hosts(tmp_path):
    bundle = tmp_path / "ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    summary = generate_etc(tmp_path / "etc", ca_bundle=bundle, uses_host_usr=False)
    assert (tmp_path / "etc/ssl/certs/ca-certificates.crt").read_bytes() == bundle.read_bytes()
    assert summary["ca_bundle_bytes"] == bundle.stat().st_size


def test_a_missing_ca_bundle_gives_an_empty_one(tmp_path):
    generate_etc(tmp_path / "etc", ca_bundle=tmp_path / "missing", uses_host_usr=False)
    assert (tmp_path / "etc/ssl/certs/ca-certificates.crt").read_bytes() == b""


def test_host_usr_extras_only_point_into_usr(tmp_path, monkeypatch):
    alternatives = tmp_path / "alternatives"
    alternatives.mkdir()
    os.symlink("/usr/bin/mawk", alternatives / "awk")
    os.symlink("/etc/shadow", alternatives / "evil")
    os.symlink("/usr/../etc/shadow", alternatives / "climb")
    (alternatives / "README").write_text("not a link")
    monkeypatch.setattr(etcgen, "HOST_ALTERNATIVES", alternatives)
    summary = generate_etc(tmp_path / "etc", uses_host_usr=True)
    links = {entry.name: os.readlink(entry.path) for entry in os.scandir(tmp_path / "etc/alternatives")}
    assert links == {"awk": "/usr/bin/mawk"} and summary["alternatives"] == 1


def test_an_existing_directory_or_a_bad_hostname_is_refused(tmp_path):
    (tmp_path / "etc").mkdir()
    with pytest.raises(FileExistsError):
        generate_etc(tmp_path / "etc")
    for hostname in ("", "a b", "x" * 64, "../x"):
        with pytest.raises(ValueError):
            generate_etc(tmp_path / f"etc-{len(hostname)}", hostname=hostname)

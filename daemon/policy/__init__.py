"""tkbox's policy engine: decides every tool call ("door") against a pack of rules.

Modelled on Tracekit's policy v2. A *pack* (YAML, ``packs/default.yaml``) maps tool names to classes
(shell, fs, http, mcp, unknown) and lists deny / ask / flag rules, each a regex over one argument
field. ``evaluate`` classifies a call, checks its arguments, reads a shell command through the
deobfuscation normaliser (every reading a rule should see) and returns the strictest verdict of the
rules that fire: allow < flag < ask < deny. ``tkbox policy check`` (``check_main``) runs the same
evaluation from the command line and records nothing. See docs/policy.md.

Modules: errors (PolicyError), context (PolicyContext), yamlsource (strict YAML with lines), schema
(the pack format), loader (load_pack: extends, placeholders, regexes), pack (PolicyPack, hash),
classes (tool -> class), args (argument shapes), the normaliser (shellast, shellparse, escapes, params,
render, commands, decoders, normalise; download then run: fileuse, fetchers, fetchrun), engine (evaluate,
Verdict), check (check_main).
"""

from .check import check_main
from .context import PolicyContext
from .engine import Verdict, evaluate
from .errors import PolicyError
from .loader import load_pack
from .normalise import normalise_command
from .pack import PolicyPack

__all__ = ["PolicyError", "PolicyContext", "PolicyPack", "Verdict", "load_pack", "evaluate", "normalise_command",
           "check_main"]

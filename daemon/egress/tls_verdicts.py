"""What the egress proxy's TLS readers answer: the refusal rules, ``Admit`` and ``Refuse``, and box bytes shown safely.

Each rule is a stable name with one hint saying what the client or the operator can do; a refusal's message is the
detail (what was wrong) followed by that hint. Names and bytes from a ClientHello are box-controlled: they appear in
messages only through ``shown``, as quoted printable ASCII with every other byte escaped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NOT_TLS = "egress-not-tls"
BAD_CLIENTHELLO = "egress-bad-clienthello"
CLIENTHELLO_TOO_LARGE = "egress-clienthello-too-large"
ECH = "egress-ech"
BAD_SNI = "egress-bad-sni"
SNI_MISSING = "egress-sni-missing"
SNI_MISMATCH = "egress-sni-mismatch"
BAD_SERVERHELLO = "egress-bad-serverhello"
HELD_TOO_MUCH = "egress-held-too-much"

RULE_HINTS: dict[str, str] = {
    NOT_TLS: "this tunnel carries TLS only; for another protocol the allowlist needs an entry naming this port "
             "(tkbox allow BOX HOST:PORT)",
    BAD_CLIENTHELLO: "the proxy forwards a tunnel only after reading a well-formed TLS ClientHello (RFC 8446); "
                     "use a standard TLS client",
    CLIENTHELLO_TOO_LARGE: "",  # the detail is the limit's own refusal, which says what to do
    ECH: "the proxy must see which server the client names: turn encrypted ClientHello off in the client "
         "(curl --ech false; Chromium sends it by default, even to servers without ECH: "
         "--disable-features=EncryptedClientHello)",
    BAD_SNI: "the client must name the server in exactly one host_name entry of one server_name extension, "
             "an ASCII host name (RFC 6066)",
    SNI_MISSING: "the client must send the CONNECT host as its TLS server name (SNI); turn SNI on in the client",
    SNI_MISMATCH: "a tunnel carries TLS only to the host it was opened for: CONNECT to the host the client "
                  "names (the allowlist decides that host)",
    BAD_SERVERHELLO: "the upstream did not answer the ClientHello as a TLS server does; check that it serves TLS "
                     "on this port",
    HELD_TOO_MUCH: "a client waits for the server's answer to its ClientHello before sending much more; "
                   "use a standard TLS client",
}


@dataclass(frozen=True)
class Admit:
    """A ClientHello the proxy may forward.

    ``forward`` is exactly the records that carry it (for a hello after a HelloRetryRequest, with the
    change_cipher_spec and early-data records the client sent before it), no byte after its last record;
    ``rest`` is every byte fed after them, to be forwarded only after ``forward`` (and, see ``tls_opening``, only
    once the server's first answer is known). ``server_name`` is the name checked (ASCII lower case, no trailing
    dot), None when the CONNECT host is an IP address and the hello rightly carries no server_name.
    """

    forward: bytes = field(repr=False)
    rest: bytes = field(repr=False)
    server_name: str | None
    offers_early_data: bool
    after_retry: bool


@dataclass(frozen=True)
class Refuse:
    """A refusal: ``rule`` is one of the names above, ``message`` says what was wrong and what to do.

    ``received`` is every byte fed so far: after ``egress-not-tls`` a caller that allows a plain tunnel to this
    port forwards them; after any other rule the connection is closed and they are dropped.
    """

    rule: str
    message: str
    received: bytes = field(default=b"", repr=False)


class HelloRefused(Exception):
    """Raised inside the readers; becomes a ``Refuse``. ``detail`` says what was wrong, without the hint."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(detail)
        self.rule = rule
        self.detail = detail

    def refusal(self, received: bytes) -> Refuse:
        return Refuse(self.rule, message_for(self.rule, self.detail), received)


def message_for(rule: str, detail: str) -> str:
    """The refusal message: ``detail`` then the rule's hint."""
    hint = RULE_HINTS[rule]
    return f"{detail}; {hint}" if hint else detail


def shown(raw: bytes, limit: int = 80) -> str:
    """``raw`` quoted as printable ASCII: backslash and quote escaped, every other byte as ``\\xNN``; at most
    ``limit`` bytes are shown, then the length."""
    parts = []
    for byte in raw[:limit]:
        if byte == 0x5C:
            parts.append("\\\\")
        elif byte == 0x22:
            parts.append('\\"')
        elif 0x20 <= byte < 0x7F:
            parts.append(chr(byte))
        else:
            parts.append(f"\\x{byte:02x}")
    text = '"' + "".join(parts) + '"'
    if len(raw) > limit:
        text += f" (the first {limit} of {len(raw)} bytes)"
    return text


def markdown_table() -> str:
    """The TLS rule table of docs/egress.md (a test keeps the two equal)."""
    rows = ["| rule | what to do |", "|---|---|"]
    for rule, hint in RULE_HINTS.items():
        rows.append(f"| `{rule}` | {hint or 'the message names the limit and says what to do'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

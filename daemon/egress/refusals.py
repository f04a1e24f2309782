"""Every refusal of the egress door's target and address checks: a stable rule id, what was wrong, what to do.

A refusal's message is one line: what was wrong (quoting box-controlled text only through ``shown``, which
escapes it and cuts it short), then the rule's advice.  The rule ids are stable: records, the HTTP 403 body and
docs/egress.md name them.
"""

from __future__ import annotations

SHOWN_CHARACTERS = 80

# rule id -> what the agent or the operator can do about it
RULES: dict[str, str] = {
    "target-length": "send a shorter target",
    "target-encoding": "send the target as UTF-8 (better: ASCII, with IDNA A-labels for names)",
    "target-control": "remove control characters and spaces from the target",
    "target-backslash": "use '/' in URLs; a backslash is read as '/' by some parsers and as a character by others",
    "target-userinfo": "remove 'user@' from the target; the egress proxy carries no credentials in URLs",
    "target-percent": "write the host without percent-encoding",
    "target-fragment": "remove the '#fragment': it is never sent to a server",
    "target-form": "send CONNECT host:port, or an absolute http://host[:port]/path URL",
    "target-scheme": "send https:// and other TLS traffic through CONNECT host:443; only http:// goes as a URL",
    "target-path": "send an origin-form path: '/' then RFC 3986 characters, valid %XX escapes, no '.' or '..' "
                   "segments",
    "port-missing": "name the port: CONNECT host:443",
    "port-invalid": "write the port as a decimal number from 1 to 65535 without sign or leading zeros",
    "authority-colons": "put an IPv6 address in brackets ([2001:db8::1]:443); a port is one number after one ':'",
    "ipv4-form": "write an IPv4 address as four decimal numbers 0-255 without leading zeros (a.b.c.d)",
    "ipv6-form": "write an IPv6 address in brackets, as RFC 4291 text: [2001:db8::1]",
    "ipv6-zone": "remove the zone id: a box may not reach link-local addresses",
    "host-empty": "name a host",
    "host-chars": "use letters, digits, '-' and '.' in host names (IDNA for other scripts)",
    "host-label": "use labels of 1-63 characters that neither start nor end with '-', separated by single dots "
                  "(one trailing dot at most)",
    "host-length": "use a host name of at most 253 characters",
    "host-idna": "use a name that is valid IDNA 2008 (lower case, NFC, no mapped or disallowed characters), or "
                 "its xn-- A-label",
    "host-unicode-dot": "separate labels with '.' (U+002E) only",
    "host-single-label": "use the fully qualified name: a one-label name is completed by the resolver's search "
                         "domains, so it is not the name decided",
    "host-special-use": "a special-use name (RFC 6761 and after) never names an outside service; use a public "
                        "name",
    "host-header": "send exactly one Host header naming the URL's host and port",
    "decision-url": "a WebFetch url is scheme://host:port exactly as tkbox writes it (lower case, A-labels, "
                    "explicit port)",
    "address-special": "a box may reach only public addresses; nothing the operator can allow changes this",
    "address-metadata": "cloud metadata services hand out the host's credentials; a box never reaches them",
    "address-host": "a box never reaches the host it runs on; serve what the job needs on another host",
    "address-operator-block": "the operator blocks this range (tkbox daemon --egress-block)",
    "address-zone": "a scoped (zone id) address is link-local; a box never reaches it",
    "resolved-none": "the name has no address; check the name, or pin one with --resolve NAME=ADDR",
    "resolved-too-many": "the name resolves to too many addresses to check; pin one with --resolve NAME=ADDR",
}


class EgressRefused(ValueError):
    """A connection target or address the egress door refuses; ``rule`` is a key of ``RULES``."""

    def __init__(self, rule: str, what: str) -> None:
        if rule not in RULES:
            raise KeyError(f"unknown egress rule {rule!r}")
        super().__init__(f"{what}; {RULES[rule]} (rule {rule})")
        self.rule = rule
        self.what = what


def shown(text: str) -> str:
    """``text`` quoted for a message: every non-ASCII and control character escaped, at most 80 characters."""
    if len(text) > SHOWN_CHARACTERS:
        return ascii(text[:SHOWN_CHARACTERS]) + f"... ({len(text)} characters)"
    return ascii(text)


def escaped(text: str) -> str:
    """``text`` (a library's error message that may quote box text) with every non-ASCII and control character
    escaped, unquoted, at most 160 characters."""
    return ascii(text[:2 * SHOWN_CHARACTERS])[1:-1]


def markdown_table() -> str:
    """The rule table of docs/egress.md (a test keeps the two equal)."""
    rows = ["| rule | what to do |", "|---|---|"]
    rows += [f"| `{rule}` | {advice} |" for rule, advice in RULES.items()]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

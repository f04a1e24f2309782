"""Run the harmless text filters of a pipeline statically, to see what a decoded payload says.

``echo cm0gLXJmIC8K | base64 -d | sh`` runs ``rm -rf /``: the normaliser works that out by running
each stage that only transforms text (echo, printf, cat, base64/base32 -d, xxd -r -p, rev, tr,
gunzip/bzip2/xz -d, openssl base64 -d) on the bytes the previous one produced. A stage that reads a
file, the network or anything else is not static and ends the evaluation (``None``).
Output is capped at MAX_OUTPUT bytes per stage and decompression is bounded; never raises.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import lzma
import re
import zlib

from .escapes import decode_echo, decode_printf_format

MAX_OUTPUT = 1 << 20

# Programs whose output is a transformation of their input (an obfuscation step when used on a literal).
DECODERS = frozenset({"base64", "base32", "xxd", "rev", "tr", "gunzip", "zcat", "gzip", "bzip2", "bunzip2",
                      "bzcat", "xz", "unxz", "xzcat", "lzma", "unlzma", "openssl", "printf", "basenc"})


def _cap(data: bytes) -> bytes:
    return data[:MAX_OUTPUT]


def _flags(args: list[str]) -> tuple[set[str], list[str]]:
    """Split short/long options from operands (``-dw0`` gives d, w, 0)."""
    flags: set[str] = set()
    operands: list[str] = []
    for arg in args:
        if arg.startswith("--") and len(arg) > 2:
            flags.add(arg)
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(arg[1:])
        else:
            operands.append(arg)
    return flags, operands


def _echo(args: list[str]) -> bytes:
    interpret, newline = False, True
    while args and re.fullmatch(r"-[neE]+", args[0]):
        for flag in args[0][1:]:
            if flag == "n":
                newline = False
            else:
                interpret = flag == "e"
        args = args[1:]
    text = " ".join(args)
    if interpret:
        text, stopped = decode_echo(text)
        if stopped:
            newline = False
    return _cap((text + ("\n" if newline else "")).encode("utf-8", "replace"))


_CONVERSION = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d+))?([diouxXcsbeEfgGq%])")


def printf(args: list[str]) -> str | None:
    """bash printf FORMAT [ARGS...]: the format is reused until the arguments run out."""
    if not args:
        return None
    fmt = decode_printf_format(args[0])
    rest = args[1:]
    out: list[str] = []
    size = 0
    for _round in range(10_000):
        consumed = False

        def convert(m: re.Match[str]) -> str:
            nonlocal consumed
            kind = m.group(4)
            if kind == "%":
                return "%"
            value = rest.pop(0) if rest else ""
            consumed = True
            if kind == "b":
                return decode_echo(value)[0]
            if kind in "diouxXc":
                if kind == "c":
                    return value[:1]
                try:
                    number = int(value or "0", 0)
                except ValueError:
                    return "0"
                return {"x": format(number, "x"), "X": format(number, "X"), "o": format(number, "o")}.get(
                    kind, str(number))
            return value

        piece = _CONVERSION.sub(convert, fmt)
        out.append(piece)
        size += len(piece)
        if not rest or not consumed or size > MAX_OUTPUT:
            break
    return "".join(out)[:MAX_OUTPUT]


def _b64(data: bytes, decode: bool, alphabet: str) -> bytes | None:
    if not decode:
        encoded = base64.b64encode(data) if alphabet == "64" else base64.b32encode(data)
        return _cap(encoded + b"\n")
    compact = re.sub(rb"\s+", b"", data)
    try:
        if alphabet == "64":
            compact = re.sub(rb"[^A-Za-z0-9+/=_-]", b"", compact).rstrip(b"=")
            compact += b"=" * (-len(compact) % 4)
            return _cap(base64.b64decode(compact.replace(b"-", b"+").replace(b"_", b"/")))
        compact = compact.upper().rstrip(b"=")
        return _cap(base64.b32decode(compact + b"=" * (-len(compact) % 8)))
    except (binascii.Error, ValueError):
        return None


def _tr_set(spec: str) -> str | None:
    """Expand a tr SET: ranges, classes and escapes (bounded)."""
    classes = {"[:lower:]": "abcdefghijklmnopqrstuvwxyz", "[:upper:]": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
               "[:digit:]": "0123456789", "[:space:]": " \t\n\r\f\v", "[:blank:]": " \t"}
    classes["[:alpha:]"] = classes["[:lower:]"] + classes["[:upper:]"]
    classes["[:alnum:]"] = classes["[:alpha:]"] + classes["[:digit:]"]
    for name, chars in classes.items():
        spec = spec.replace(name, chars)
    spec = decode_printf_format(spec)
    out: list[str] = []
    i = 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            low, high = ord(spec[i]), ord(spec[i + 2])
            if high < low or high - low > 4096:
                return None
            out.extend(chr(c) for c in range(low, high + 1))
            i += 3
        else:
            out.append(spec[i])
            i += 1
    return "".join(out)


def _tr(args: list[str], data: bytes) -> bytes | None:
    flags, operands = _flags(args)
    text = data.decode("utf-8", "replace")
    if flags - {"d", "s"} or not operands:
        return None
    first = _tr_set(operands[0])
    if first is None:
        return None
    if "d" in flags:
        drop = set(first)
        return _cap("".join(c for c in text if c not in drop).encode("utf-8", "replace"))
    if len(operands) < 2:
        return None
    second = _tr_set(operands[1])
    if not second:
        return None
    second = second + second[-1] * max(0, len(first) - len(second))
    table = {ord(a): b for a, b in zip(first, second, strict=False)}
    out = text.translate(table)
    if "s" in flags:
        squeeze = set(second)
        out = re.sub(r"(.)\1+", lambda m: m.group(1) if m.group(1) in squeeze else m.group(0), out)
    return _cap(out.encode("utf-8", "replace"))


def _decompress(kind: str, data: bytes) -> bytes | None:
    try:
        if kind == "gzip":
            return zlib.decompressobj(wbits=47).decompress(data, MAX_OUTPUT)
        if kind == "bzip2":
            return bz2.BZ2Decompressor().decompress(data, max_length=MAX_OUTPUT)
        return lzma.LZMADecompressor().decompress(data, max_length=MAX_OUTPUT)
    except (zlib.error, OSError, EOFError, ValueError, lzma.LZMAError):
        return None


def run_stage(program: str, args: list[str], stdin: bytes | None) -> bytes | None:
    """Output of one static stage given its input (None: input unknown / not a static stage)."""
    if program == "echo":
        return _echo(args)
    if program == "printf":
        if args[:1] == ["-v"]:
            return None  # printf -v NAME assigns a variable (the normaliser handles that)
        text = printf(args[1:] if args[:1] == ["--"] else args)
        return None if text is None else text.encode("utf-8", "replace")
    if stdin is None:
        return None
    if program in ("base64", "base32") and "-w" in args[:-1]:
        at = args.index("-w")
        args = args[:at] + args[at + 2:]
    flags, operands = _flags(args)
    if operands and operands != ["-"] and program not in ("tr", "openssl"):
        return None  # reads a file
    if program == "cat":
        return stdin if not flags else None
    if program in ("base64", "base32"):
        decode = bool(flags & {"d", "D", "--decode"})
        return _b64(stdin, decode, "64" if program == "base64" else "32")
    if program == "basenc":
        decode = bool(flags & {"d", "--decode"})
        if "--base64" in flags or "--base64url" in flags:
            return _b64(stdin, decode, "64")
        if "--base32" in flags:
            return _b64(stdin, decode, "32")
        return None
    if program == "xxd":
        if "r" in flags or "--revert" in flags:
            hex_digits = re.sub(rb"[^0-9a-fA-F]", b"", stdin)
            return _cap(binascii.unhexlify(hex_digits[: len(hex_digits) // 2 * 2]))
        if "p" in flags or "--plain" in flags:
            return _cap(binascii.hexlify(stdin) + b"\n")
        return None
    if program == "rev":
        lines = stdin.decode("utf-8", "replace").split("\n")
        return _cap("\n".join(line[::-1] for line in lines).encode("utf-8", "replace"))
    if program == "tr":
        return _tr(args, stdin)
    if program in ("gunzip", "zcat") or (program == "gzip" and flags & {"d", "--decompress"}):
        return _decompress("gzip", stdin)
    if program in ("bunzip2", "bzcat") or (program == "bzip2" and flags & {"d", "--decompress"}):
        return _decompress("bzip2", stdin)
    if program in ("unxz", "xzcat", "unlzma") or (program in ("xz", "lzma") and flags & {"d", "--decompress"}):
        return _decompress("xz", stdin)
    if program == "openssl":
        words = [a for a in args if not a.startswith("-")]
        if words[:1] in (["base64"], ["enc"]) and ("-d" in args or "-base64" in args or "-a" in args):
            return _b64(stdin, "-d" in args, "64")
        return None
    return None

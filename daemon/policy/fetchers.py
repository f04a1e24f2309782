"""What a command writes by its own options or code: how the programs that fetch name their output files.

For fetchrun.py, beside fileuse.py (redirections, copies, extraction, runs). Pure and conservative: where
the words do not show a name (a server-chosen name, a recursive download, a file that code writes through a
variable) the file is ``*`` (any path) or ``DIR/*``.

``curl -o/-O`` (``-J``: any name), ``wget -O``, ``-P`` and its default name (the URL's last path segment,
``index.html`` for none; ``-r``, ``-m``, ``-i``, ``--content-disposition``: any name), ``aria2c -o/-d``,
``http``/``https``/``xh`` ``-o``/``--download``, ``fetch -o``, ``ncat -o``, ``socat OPEN:``/``CREATE:``,
``tftp -c get``; ``tee``; and interpreter code (``-c``/``-e``) that fetches (``urlretrieve``, ``urlopen``,
``requests``, ``LWP``, ``open-uri``, ``fetch(``...), with the files it writes (``urlretrieve(url, 'x')``,
``open('x', 'wb')``, ``writeFileSync('x', ...)``...). Which programs fetch is the pack's ``downloader``
list; this module only knows how these name their files (a fetcher it does not know is still seen when
its output is redirected: ``> FILE``, ``| tee FILE``).
"""

from __future__ import annotations

import re

from .fileuse import ANY, QUOTED, Stage, interpreter_code, join_under, operands, scan

# -- URLs --------------------------------------------------------------------------------------------

_SCHEME_HOST = re.compile(r"[A-Za-z][\w+.-]{0,31}://[^/?#]*")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")


def remote_name(url: str, empty: str = ANY) -> str:
    """The file name a downloader takes from ``url`` (its last path segment); ``empty`` if the path has none."""
    m = _SCHEME_HOST.match(url)
    path = url[m.end():] if m else (url.partition("/")[2] if "/" in url else "")
    path = path.partition("#")[0]
    path, query, _rest = path.partition("?")
    name = path.rsplit("/", 1)[-1]
    if not name or name in (".", ".."):
        return empty
    name = _PERCENT.sub(ANY, name)  # saved percent-encoded or decoded: either
    return name + (ANY if query else "")  # wget keeps "?query" in the name


# -- what fetchers write -----------------------------------------------------------------------------

_CURL_LONG = frozenset({"--header", "--user-agent", "--data", "--data-raw", "--data-binary", "--data-urlencode",
                        "--form", "--cookie", "--cookie-jar", "--max-time", "--connect-timeout", "--retry",
                        "--retry-delay", "--retry-max-time", "--proxy", "--user", "--request", "--referer",
                        "--cacert", "--cert", "--key", "--config", "--write-out", "--range", "--limit-rate",
                        "--output-dir", "--dump-header", "--resolve", "--max-filesize", "--url", "--proto",
                        "--trace", "--trace-ascii", "--stderr", "--unix-socket", "--interface", "--output",
                        "--continue-at", "--time-cond", "--quote", "--upload-file"})
_WGET_LONG = frozenset({"--output-document", "--directory-prefix", "--input-file", "--user-agent", "--header",
                        "--tries", "--timeout", "--wait", "--quota", "--level", "--accept", "--reject", "--domains",
                        "--base", "--post-data", "--post-file", "--load-cookies", "--save-cookies", "--output-file",
                        "--append-output", "--user", "--password", "--execute", "--referer", "--limit-rate"})
_ARIA_LONG = frozenset({"--out", "--dir", "--input-file", "--max-connection-per-server", "--split", "--log",
                        "--max-concurrent-downloads", "--user-agent", "--header"})
_HTTPIE_LONG = frozenset({"--output", "--auth", "--auth-type", "--print", "--session", "--verify", "--cert",
                          "--cert-key", "--proxy", "--timeout"})


def _curl(args: list[str]) -> list[str]:
    options, urls = scan(args, "AbcCdDEeFHKmoPQrtTuUwxXyYz", _CURL_LONG)
    urls += [value for name, value in options if name == "--url" and value]
    names = {name for name, _value in options}
    files = [value for name, value in options if name in ("-o", "--output") and value and value != "-"]
    if names & {"-O", "--remote-name", "--remote-name-all"}:
        blind = bool(names & {"-J", "--remote-header-name"})
        files += [ANY if blind else remote_name(url) for url in urls] or [ANY]
    return files


def _wget(args: list[str]) -> list[str]:
    options, urls = scan(args, "OoaPeiUtTwQlARDIXB", _WGET_LONG)
    values = {name: value for name, value in options}
    document = values.get("-O", values.get("--output-document"))
    if document is not None:
        return [document] if document and document != "-" else []
    prefix = values.get("-P", values.get("--directory-prefix"))
    blind = any(name in ("-r", "-m", "-x", "-i", "--recursive", "--mirror", "--force-directories", "--input-file",
                         "--content-disposition", "--trust-server-names") for name in values)
    if blind:
        return [join_under(prefix, ANY)]
    return [join_under(prefix, remote_name(url, "index.html")) for url in urls]


def _aria2c(args: list[str]) -> list[str]:
    options, urls = scan(args, "odixsjktml", _ARIA_LONG)
    values = {name: value for name, value in options}
    directory = values.get("-d", values.get("--dir"))
    out = values.get("-o", values.get("--out"))
    if out:
        return [join_under(directory, out)]
    if "-i" in values or "--input-file" in values or not urls:
        return [join_under(directory, ANY)]
    return [join_under(directory, remote_name(url, "index.html")) for url in urls]


def _httpie(args: list[str]) -> list[str]:
    options, _operands = scan(args, "oaAp", _HTTPIE_LONG)
    values = {name: value for name, value in options}
    out = values.get("-o", values.get("--output"))
    if out and out != "-":
        return [out]
    return [ANY] if "-d" in values or "--download" in values else []


def _fetch(args: list[str]) -> list[str]:
    options, urls = scan(args, "oNTSB")
    out = next((value for name, value in options if name == "-o"), None)
    if out is not None:
        return [out] if out and out != "-" else []
    return [remote_name(url) for url in urls]


def _ncat(args: list[str]) -> list[str]:
    options, _operands = scan(args, "opwiscC", frozenset({"--output", "--hex-dump", "--append-output"}))
    return [value for name, value in options if name in ("-o", "--output", "--hex-dump") and value]


_SOCAT_FILE = re.compile(r"(?i)^(?:open|create|gopen):([^,]{1,4096})")


def _socat(args: list[str]) -> list[str]:
    return [m.group(1) for arg in args if (m := _SOCAT_FILE.match(arg))]


def _tftp(args: list[str]) -> list[str]:
    if "-c" not in args:
        return []
    rest = args[args.index("-c") + 1:]
    if rest[:1] != ["get"] or len(rest) < 2:
        return []
    return [rest[2]] if len(rest) > 2 else [rest[1].rsplit("/", 1)[-1] or ANY]


FETCHER_OUTPUTS = {"curl": _curl, "wget": _wget, "aria2c": _aria2c, "http": _httpie, "https": _httpie,
                   "httpie": _httpie, "xh": _httpie, "fetch": _fetch, "ncat": _ncat, "socat": _socat, "tftp": _tftp}

# Interpreter code (-c/-e) that fetches, the files it writes, and the files it runs.
_CODE_FETCH = re.compile(r"urlretrieve|urlopen|urllib|requests\.\w+\(|httpx|http\.client|aiohttp|pycurl|"
                         r"LWP|HTTP::Tiny|getstore|Net::HTTP|open-uri|URI\.open|\bfetch\(|\bhttps?\.get\(|axios|"
                         r"file_get_contents\(\s*['\"]\w+://|curl_exec|copy\(\s*['\"]\w+://")
_CODE_WRITE = re.compile(r"(?:urlretrieve|getstore|mirror|copy)\s*\(\s*[^,()]{0,2048}?,\s*(?:" + QUOTED + ")?|"
                         r"\bopen\s*\(\s*(?:" + QUOTED + r")?[^)]{0,256}?['\"][rb+]*[wax]|"
                         r"(?:writeFileSync|writeFile|createWriteStream|file_put_contents|File\.(?:bin)?write|"
                         r"IO\.(?:bin)?write|fopen)\s*\(\s*(?:" + QUOTED + ")?|"
                         r"Path\s*\(\s*(?:" + QUOTED + r")?[^)]{0,256}\)\s*\.write_(?:bytes|text)|"
                         r"\bopen\s*\(?\s*(?:my\s+)?\$?\w*\s*,\s*['\"]\+?>")


def fetch_token(argv: tuple[str, ...]) -> str:
    """The program's name as a pipeline stage; ``NAME:fetch`` for interpreter code that fetches."""
    name = argv[0] if argv else ""
    code = interpreter_code(argv)
    if code is not None and _CODE_FETCH.search(code):
        return f"{name}:fetch"
    return name


def may_write(stage: Stage) -> bool:
    """Cheap test: whether a stage can write a file at all (redirection, tee, a fetcher, code, extraction)."""
    if stage.writes:
        return True
    name = stage.argv[0] if stage.argv else ""
    return name in FETCHER_OUTPUTS or name in ("tee", "tar", "bsdtar") or interpreter_code(stage.argv) is not None


def written_files(argv: tuple[str, ...]) -> list[str]:
    """Files a command writes by its own options or code (not by redirection): ``tee``, fetchers, code."""
    if not argv:
        return []
    name = argv[0]
    if name == "tee":
        return [arg for arg in operands(argv) if arg != "-"]
    fetcher = FETCHER_OUTPUTS.get(name)
    if fetcher is not None:
        return fetcher(list(argv[1:]))
    code = interpreter_code(argv)
    if code is None:
        return []
    files = []
    for m in _CODE_WRITE.finditer(code):
        found = [group for group in m.groups() if group]
        files.append(found[0] if found else ANY)
    return files

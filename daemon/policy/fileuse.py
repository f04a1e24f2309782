"""What one simple command does with files: which it makes from others and which it runs.

Read from a command's words as the renderer resolved them (wrappers stripped, long options spelled short;
see render.py), for fetchrun.py, which looks for a download that the same command line runs (the files
fetchers write are fetchers.py's). Pure and conservative: where the words do not show a name (an
archive's members, a module's file) the file is ``*`` (any path) or ``DIR/*``.

* Stage: one command as the renderer saw it, with the files its redirections write and read.
* Derivations (a file made from another): ``cp``, ``mv``, ``install``, ``ln``, ``rsync``, ``dd``, and
  extraction: ``tar -x``, ``unzip``, ``7z x``, ``gunzip``/``xz -d``/``bunzip2``/``zstd -d``....
* Runs: the program itself when named by a path (``./x``, ``/tmp/x``, or a word with an unknown ``$x``)
  or by a bare name (looked up in PATH), a shell's script (``sh x``, ``bash --rcfile x``),
  ``source``/``.``, an interpreter's script or loaded file (``python3 x``, ``python3 -m mod``,
  ``node -r ./x``, ``ruby -r ./x``, ``php -f x``) and files its ``-c``/``-e`` code runs
  (``exec(open('x').read())``, ``require('./x')``, ``do 'x'``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .commands import SHELLS, interpreter_call, interpreter_family, shell_script_files

ANY = "*"


@dataclass(frozen=True, slots=True)
class Stage:
    """One command of a pipeline as the renderer resolved it (a subshell or brace group is one ``group`` stage)."""

    argv: tuple[str, ...]     # wrappers stripped, long options spelled short; argv[0] is the program's name
    head: str                 # the program word as written once wrappers are gone ("./x.sh", "/tmp/x", "sh")
    writes: tuple[str, ...]   # files its output redirections write
    reads: tuple[str, ...]    # files its input redirections read
    runs_stdin: bool          # it runs code read from its standard input (sh, python3 -, source /dev/stdin)
    group: bool               # a subshell, a group's closing brace or a bare redirection: output of unknown origin
    wrapper_paths: tuple[str, ...] = ()  # wrappers written as paths (/tmp/nice, ./env): files that run too


@dataclass(frozen=True, slots=True)
class Run:
    """A file a command runs: ``path`` as written, or a bare program ``name`` looked up in PATH."""

    path: str
    by_name: bool = False


@dataclass(frozen=True, slots=True)
class Derivation:
    """Files made from other files by one command: each of ``targets`` may hold what ``sources`` held; with
    ``tree``, a source may be a directory whose files land under the targets by the same names."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    tree: bool = False


def scan(args: list[str] | tuple[str, ...], short_values: str, long_values: frozenset[str] = frozenset()
         ) -> tuple[list[tuple[str, str | None]], list[str]]:
    """(options with their values, operands): ``-abc`` clusters, ``-ovalue``, ``--name=value``, ``--``."""
    options: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i, n = 0, len(args)
    while i < n:
        arg = args[i]
        if arg == "--":
            operands.extend(args[i + 1:])
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                options.append((name, value))
            elif name in long_values and i + 1 < n:
                options.append((name, args[i + 1]))
                i += 1
            else:
                options.append((name, None))
        elif arg.startswith("-") and len(arg) > 1:
            for k in range(1, len(arg)):
                char = arg[k]
                if char in short_values:
                    if k + 1 < len(arg):
                        options.append(("-" + char, arg[k + 1:]))
                    elif i + 1 < n:
                        options.append(("-" + char, args[i + 1]))
                        i += 1
                    else:
                        options.append(("-" + char, ""))
                    break
                options.append(("-" + char, None))
        else:
            operands.append(arg)
        i += 1
    return options, operands


_NOT_FILES = frozenset({"", "-", "/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})


def redirect_files(redirects: list[tuple[str, str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files written, files read) by redirections given as (fd, operator, target)."""
    writes, reads = [], []
    for _fd, op, target in redirects:
        if target in _NOT_FILES or target.startswith("/dev/fd/"):
            continue
        if op in (">", ">>", ">|", "&>", "&>>", "<>") or (op == ">&" and not target.isdigit()):
            writes.append(target)
        if op in ("<", "<>"):
            reads.append(target)
    return tuple(writes), tuple(reads)


def operands(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The words of a command that do not start with a dash (what a reader such as ``cat`` may read)."""
    return [arg for arg in argv[1:] if not arg.startswith("-") or arg == "-"]


QUOTED = r"""['"]([^'"\n]{1,4096})['"]"""
_CODE_RUN = re.compile(r"(?:exec\s*\(\s*open|runpy\.run_path|execfile|require_relative|require_once|include_once|"
                       r"\brequire|\binclude|\bload|\bdo|\bimport)\s*\(?\s*" + QUOTED)
_INTERPRETER_OPTIONS = {  # family -> (short options taking a value, options whose value is a file it loads)
    "python": ("WX", ()),
    "perl": ("I", ()),
    "ruby": ("ICEr", ("-r",)),
    "node": ("Cr", ("-r", "--require", "--import", "--loader", "--experimental-loader")),
    "php": ("cdtSfz", ("-f", "-z")),
    "lua": ("l", ()),
}
_NODE_LONG = frozenset({"--require", "--import", "--loader", "--experimental-loader", "--input-type", "--title",
                        "--conditions", "--env-file"})


def interpreter_code(argv: tuple[str, ...]) -> str | None:
    """The code an interpreter is given with -c/-e (argv[0] is already a program name)."""
    if not argv or interpreter_family(argv[0]) is None:
        return None
    call = interpreter_call(list(argv))
    return call[0] if call is not None and call[0] else None


def join_under(directory: str | None, name: str) -> str:
    """``name`` inside ``directory`` (just ``name`` when there is none)."""
    return name if not directory else directory.rstrip("/") + "/" + name


# -- files made from other files ---------------------------------------------------------------------

_COPY_VALUES = {"cp": ("tS", frozenset({"--target-directory", "--suffix"})),
                "mv": ("tS", frozenset({"--target-directory", "--suffix"})),
                "install": ("mogtS", frozenset({"--mode", "--owner", "--group", "--target-directory", "--suffix"})),
                "ln": ("tS", frozenset({"--target-directory", "--suffix"})),
                "rsync": ("efT", frozenset({"--rsh", "--filter", "--exclude", "--include", "--temp-dir"}))}
_UNPACK_SUFFIX = re.compile(r"\.(?:gz|tgz|xz|txz|bz2|tbz2?|zst|Z|lz|lzma)$")
_UNPACKERS = {"gunzip": "", "unxz": "", "bunzip2": "", "unzstd": "", "uncompress": "", "unlzma": "",
              "gzip": "d", "xz": "d", "bzip2": "d", "zstd": "d", "lzip": "d"}


def _copy(name: str, args: list[str]) -> Derivation | None:
    short, long = _COPY_VALUES[name]
    options, words = scan(args, short, long)
    target_dir = next((value for option, value in options if option in ("-t", "--target-directory")), None)
    if target_dir is not None:
        sources, target = words, target_dir
    elif len(words) >= 2:
        sources, target = words[:-1], words[-1]
    else:
        return None
    targets = [target] + [join_under(target, source.rstrip("/").rsplit("/", 1)[-1]) for source in sources]
    names = {option for option, _value in options}
    if name in ("mv", "ln") or names & {"-r", "-R", "-a", "--recursive", "--archive"}:
        # a directory: what was under a source is now under the target (see fetchrun's derive)
        return Derivation((*sources, *(join_under(source, ANY) for source in sources)), tuple(targets), tree=True)
    return Derivation(tuple(sources), tuple(targets))


def _tar(args: list[str]) -> Derivation | None:
    if not args:
        return None
    first = args[0]
    bundled = not first.startswith("-")  # old style: tar xzf ARCHIVE
    letters = first if bundled else "".join(arg[1:] for arg in args if arg.startswith("-") and not arg.startswith("--"))
    extract = "x" in letters or any(arg in ("--extract", "--get") for arg in args)
    if not extract:
        return None
    rest = args[1:] if bundled else args
    options, words = scan(rest, "fCbHKLNTVX", frozenset({"--file", "--directory"}))
    archives = [value for option, value in options if option in ("-f", "--file") and value]
    if bundled and "f" in first and words:
        archives.append(words[0])
    directory = next((value for option, value in options if option in ("-C", "--directory")), None)
    return Derivation(tuple(archives) or ("-",), (join_under(directory, ANY),))  # no archive: read from stdin


def derivations(argv: tuple[str, ...]) -> list[Derivation]:
    """What a command makes from other files: copies, moves, links, and what it extracts or decompresses."""
    if not argv:
        return []
    name, args = argv[0], list(argv[1:])
    if name in _COPY_VALUES:
        found = _copy(name, args)
        return [found] if found is not None else []
    if name in ("tar", "bsdtar"):
        found = _tar(args)
        return [found] if found is not None else []
    if name == "dd":
        sources = tuple(arg[3:] for arg in args if arg.startswith("if="))
        targets = tuple(arg[3:] for arg in args if arg.startswith("of="))
        return [Derivation(sources, targets)] if sources and targets else []
    if name == "unzip":
        options, words = scan(args, "d")
        if any(option in ("-l", "-t", "-v", "-p", "-Z", "-z") for option, _ in options):
            return []
        directory = next((value for option, value in options if option == "-d"), None)
        return [Derivation(tuple(words[:1]) or (ANY,), (join_under(directory, ANY),))]
    if name in ("7z", "7za", "7zr") and args[:1] in (["x"], ["e"]):
        words = [arg for arg in args[1:] if not arg.startswith("-")]
        directory = next((arg[2:] for arg in args if arg.startswith("-o")), None)
        return [Derivation(tuple(words[:1]) or (ANY,), (join_under(directory, ANY),))]
    mode = _UNPACKERS.get(name)
    if mode is not None:
        options, words = scan(args, "S")
        letters = {option for option, _value in options}
        if (mode and not letters & {f"-{mode}", "--decompress"}) or letters & {"-c", "--stdout", "-l", "-t"}:
            return []
        return [Derivation((word,), (_UNPACK_SUFFIX.sub("", word) + ANY if _UNPACK_SUFFIX.search(word) else ANY,))
                for word in words if word != "-"]
    return []


# -- files a command runs ----------------------------------------------------------------------------

def _interpreter_runs(family: str, argv: tuple[str, ...]) -> list[Run]:
    short, loads = _INTERPRETER_OPTIONS[family]
    options, words = scan(argv[1:], short + ("m" if family == "python" else ""),
                          _NODE_LONG if family == "node" else frozenset())
    runs = [Run(value) for option, value in options if option in loads and value]
    module = next((value for option, value in options if option == "-m" and family == "python"), None)
    code = interpreter_code(argv)
    if module:
        base = module.replace(".", "/")
        runs += [Run(base + ".py"), Run(base + "/__main__.py")]
    elif code is not None:
        runs += [Run(m.group(1)) for m in _CODE_RUN.finditer(code)]
    elif words and words[0] != "-":
        runs.append(Run(words[0]))
    return runs


def run_files(stage: Stage) -> list[Run]:
    """The files one command runs (not counting code it reads from its standard input)."""
    argv = stage.argv
    runs = [Run(path) for path in stage.wrapper_paths]  # /tmp/timeout runs that file, even read as a wrapper
    if not argv:
        return runs
    name = argv[0]
    runs.append(Run(stage.head) if "/" in stage.head or "$" in stage.head else Run(name, by_name=True))
    if name in ("source", ".") and len(argv) > 1 and argv[1] not in ("/dev/stdin", "-", "/proc/self/fd/0"):
        runs.append(Run(argv[1]))
    if name in SHELLS:
        runs += [Run(path) for path in shell_script_files(list(argv))]
    family = interpreter_family(name)
    if family is not None:
        runs += _interpreter_runs(family, argv)
    return runs

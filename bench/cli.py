"""CLI start benchmark: each command an agent calls in a loop, timed as a whole process (start, import, one call to
the daemon, output, exit), against ``python -c pass`` on the same interpreter, interleaved in the same run.

    .venv/bin/python bench/cli.py [--runs 15] [--backend bwrap|ns] [--before DIR]

Runs as root (a box needs it).  Starts its own signer (``tkbox signer up``), daemon (``tkbox daemon``) and one box
in throwaway directories (HOME and XDG_* point there), as e2e/conftest.py does; stops them at the end.  The
commands run with ``.pyc`` files written (``PYTHONDONTWRITEBYTECODE`` dropped), as on a user's machine: without
them every module changed since its last ``.pyc`` is compiled again on each start.  Prints the
median of each command and its ratio to the baseline's median (goals: ``ls --json`` <= 2x, ``exec BOX -- true``
<= 3x), plus ``python -I -S -c pass`` (no site-packages at all) for reference.

``--before DIR`` also times each tkbox command as another tree's code would run it (DIR: a copy of the repo, e.g.
``git archive HEAD | tar -x -C DIR`` before a change), interleaved with the rest; both that and this tree are then
run the same way, ``python -S`` with the tree's packages and this venv's site-packages on ``sys.path`` (no
``.pth`` files, so no editable finder), in the rows named ``[before]`` and ``[after]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import machine  # noqa: E402

PYTHON = sys.executable
TKBOX = str(Path(sys.executable).parent / "tkbox")
BASELINE = "python -c pass"


def isolated_env(base: Path) -> dict[str, str]:
    """HOME, XDG_* and the runtime dirs in ``base``, so the signer, daemon and box are this run's own."""
    home, runtime = base / "home", base / "run"
    for folder in (home, runtime):
        folder.mkdir(parents=True)
    os.chmod(runtime, 0o700)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TKBOX_", "XDG_")) and key != "PYTHONDONTWRITEBYTECODE"}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / ".local/share"), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_STATE_HOME=str(home / ".local/state"), XDG_RUNTIME_DIR=str(runtime))
    return env


def tkbox(env: dict[str, str], *args: str) -> str:
    ran = subprocess.run([TKBOX, *args], env=env, capture_output=True, text=True, timeout=120)
    if ran.returncode != 0:
        raise RuntimeError(f"tkbox {' '.join(args)} exited {ran.returncode}: {ran.stderr.strip()}")
    return ran.stdout


@contextmanager
def daemon_with_a_box(backend: str) -> Iterator[tuple[dict[str, str], str]]:
    """A signer, a daemon and a running box ``bench``; yields the environment that reaches them."""
    base = Path(tempfile.mkdtemp(prefix="tkbench-cli-"))
    env = isolated_env(base)
    workspace = base / "ws"
    workspace.mkdir()
    (workspace / "README").write_text("a workspace for the CLI benchmark\n")
    tkbox(env, "signer", "up")
    daemon = subprocess.Popen([TKBOX, "daemon", "--backend", backend], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        assert daemon.stderr is not None
        for line in daemon.stderr:  # it says when it serves
            if b"serving on" in line:
                break
        else:
            raise RuntimeError(f"the daemon exited {daemon.wait(30)} before serving")
        tkbox(env, "run", "--name", "bench", "--workspace", str(workspace))
        yield env, "bench"
    finally:
        subprocess.run([TKBOX, "rm", "bench"], env=env, capture_output=True, timeout=120)
        daemon.terminate()
        daemon.wait(60)
        subprocess.run([TKBOX, "signer", "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)


RUN_TREE = ("import sys; sys.path[:0] = [{links!r}]; sys.path.append({site!r}); "
            "from tkbox_tui.cli.main import main; sys.argv[0] = 'tkbox'; sys.exit(main())")


def tree_runner(tree: Path, scratch: Path) -> list[str]:
    """``python -S -c …`` that runs ``tree``'s tkbox: its folders under their import names (symlinks), then this
    venv's site-packages for the libraries."""
    links = scratch / f"links-{tree.name}"
    links.mkdir(parents=True, exist_ok=True)
    for package, folder in (("tkbox_daemon", "daemon"), ("tkbox_guest", "guest"), ("tkbox_tui", "tkbox_tui")):
        (links / package).symlink_to(tree / folder)
    site = next(path for path in sys.path if path.endswith("site-packages"))
    return [PYTHON, "-S", "-c", RUN_TREE.format(links=str(links), site=site)]


def commands(env: dict[str, str], box: str, before: Path | None, scratch: Path) -> dict[str, list[str]]:
    lines = tkbox(env, "events", "--json").splitlines()
    last = json.loads(lines[-1])["seq"] if lines else 0
    after = max(0, last - 20)  # a page of about 20 events, then the command ends
    table = {
        BASELINE: [PYTHON, "-c", "pass"],
        "python -I -S -c pass": [PYTHON, "-I", "-S", "-c", "pass"],
        "tkbox --version": [TKBOX, "--version"],
        "tkbox ls --json": [TKBOX, "ls", "--json"],
        f"tkbox exec {box} -- true": [TKBOX, "exec", box, "--", "true"],
        f"tkbox events --after {after}": [TKBOX, "events", "--after", str(after)],
        "tkbox approvals --json": [TKBOX, "approvals", "--json"],
    }
    if before is not None:
        for label, tree in (("before", before), ("after", ROOT)):
            runner = tree_runner(tree.resolve(), scratch / label)
            for name, argv in list(table.items()):
                if name.startswith("tkbox ") and name != "tkbox --version":
                    table[f"[{label}] {name}"] = runner + argv[1:]
    return table


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    ran = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, timeout=120)
    elapsed = time.perf_counter() - start
    if ran.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {ran.returncode}: {ran.stderr.decode().strip()}")
    return elapsed


def measure(runs: int, backend: str, before: Path | None) -> dict[str, float]:
    scratch = Path(tempfile.mkdtemp(prefix="tkbench-trees-"))
    try:
        return _measure(runs, backend, before, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _measure(runs: int, backend: str, before: Path | None, scratch: Path) -> dict[str, float]:
    with daemon_with_a_box(backend) as (env, box):
        table = commands(env, box, before, scratch)
        samples: dict[str, list[float]] = {name: [] for name in table}
        for argv in table.values():  # one unmeasured round: page cache and .pyc files warm
            timed(argv, env)
        for _ in range(runs):  # interleaved: a burst of load hits every command alike
            for name, argv in table.items():
                samples[name].append(timed(argv, env))
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--backend", choices=("bwrap", "ns"), default="bwrap")
    parser.add_argument("--before", type=Path, help="a copy of the repo before a change, timed alongside")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    medians = measure(args.runs, args.backend, args.before)
    print(f"machine: {machine()}; load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"{args.runs} interleaved runs, medians")
    baseline = medians[BASELINE]
    goals = {"tkbox ls --json": 2.0}
    for name, value in medians.items():
        goal = goals.get(name, 3.0 if name.startswith("tkbox exec") else None)
        goal_text = f" (goal <= {goal:g}x)" if goal else ""
        print(f"  {name:<41} {value * 1000:7.1f} ms  {value / baseline:5.2f}x {BASELINE}{goal_text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

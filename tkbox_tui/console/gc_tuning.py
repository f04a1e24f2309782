"""The console's process lets Python's garbage collector make its full passes ten times more rarely: each stops
the console while it scans every object, and at Python's default rate one fell inside the moment an approval
prompt opened often enough to matter (``bench/console.py``, docs/performance.md)."""

from __future__ import annotations

import gc

GC_FULL_PASS_EVERY = 100
"""Young-generation passes between two of the garbage collector's full passes in the console's process (Python's
default is 10).  A full pass stops the console for as long as it scans every object — 100 to 300 ms once
Textual's caches have filled, on the machine of docs/performance.md — and at the default rate one fell inside
the moment an approval prompt opened often enough to put the 95th percentile of "event → prompt on screen" past
100 ms; ten times rarer, it stays under.  Cyclic garbage waits longer to be freed; everything else is freed as
before."""


def tune_garbage_collector() -> None:
    """A full garbage collection after every ``GC_FULL_PASS_EVERY`` middle-generation passes (the console's process:
    ``run_console``, and ``bench/console.py``, which measures the console as it runs)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_FULL_PASS_EVERY)

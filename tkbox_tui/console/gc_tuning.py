"""The console's process lets Python's garbage collector make its full passes ten times more rarely, and keeps the
objects alive at start out of them: each full pass stops the console while it scans every object, and at Python's
default rate one falls inside the moment an approval prompt opens often enough to matter (``bench/console.py``,
docs/performance.md)."""

from __future__ import annotations

import gc

GC_FULL_PASS_EVERY = 100
"""Young-generation passes between two of the garbage collector's full passes in the console's process (Python's
default is 10).  A full pass stops the console for as long as it scans every object — 100 to 650 ms once
Textual's caches have filled, on the machine of docs/performance.md — and at the default rate one falls inside
the moment an approval prompt opens often enough to double the 95th percentile of "event → prompt on screen".
Cyclic garbage waits longer to be freed; everything else is freed by reference counting, as always."""


def tune_garbage_collector() -> None:
    """A full garbage collection after every ``GC_FULL_PASS_EVERY`` middle-generation passes (the console's process:
    ``run_console``, and ``bench/console.py``, which measures the console as it runs)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_FULL_PASS_EVERY)


def freeze_startup_heap() -> None:
    """Collect, then move every object alive into the collector's permanent generation, which its passes skip.

    Called once, when the console's main screen is up (``ConsoleSettings.freeze_startup_heap``): the modules,
    Textual's and the console's classes, stylesheets, themes and the screen's widgets — about 75,000 objects, most
    of the heap — live as long as the process anyway, and a full pass that skips them takes a tenth of the time
    (7–17 ms instead of 60–90 ms, measured after a few prompts at 20,000 events/s).  Such an object still goes when
    nothing refers to it; one that becomes part of unreachable cycles later stays (a few, once: never the per-event
    objects, which come after)."""
    gc.collect()
    gc.freeze()

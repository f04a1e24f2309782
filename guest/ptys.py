"""Pseudo-terminals for ``exec`` with ``pty: true``: open one, size it, make it the child's controlling terminal.

The guest opens the pair with ``os.openpty`` and keeps the master; the child gets the slave as stdin, stdout and
stderr. ``subprocess.Popen(start_new_session=True, preexec_fn=take_controlling_tty)`` makes the child a session
leader (``setsid``) and then, after the descriptors are in place, claims fd 0 as its controlling terminal with
``TIOCSCTTY``, so line discipline signals (Ctrl-C, Ctrl-Z, Ctrl-\\) and ``SIGWINCH`` reach the foreground process
group as on any terminal. Sizes are ``TIOCSWINSZ`` on the master; the kernel sends ``SIGWINCH`` itself.

Standard library only, like the rest of the guest.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios

from .protocol import MAX_WINSIZE

_WINSIZE = struct.Struct("HHHH")  # struct winsize: ws_row, ws_col, ws_xpixel, ws_ypixel


def check_size(rows: int, cols: int) -> None:
    """Refuse a size outside 1..MAX_WINSIZE (the schema checks it too; this guards direct callers)."""
    for name, value in (("rows", rows), ("cols", cols)):
        if type(value) is not int or not 1 <= value <= MAX_WINSIZE:
            raise ValueError(f"{name} must be an integer in 1..{MAX_WINSIZE}")


def set_size(fd: int, rows: int, cols: int) -> None:
    """Set the terminal size of the pty that ``fd`` (master or slave) belongs to."""
    check_size(rows, cols)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, _WINSIZE.pack(rows, cols, 0, 0))


def get_size(fd: int) -> tuple[int, int]:
    """(rows, cols) of the pty that ``fd`` belongs to."""
    rows, cols, _, _ = _WINSIZE.unpack(fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(_WINSIZE.size)))
    return rows, cols


def open_pty(rows: int, cols: int) -> tuple[int, int]:
    """A new pty pair (master, slave), both close-on-exec, sized ``rows`` x ``cols``; raises OSError."""
    check_size(rows, cols)
    master, slave = os.openpty()
    try:
        os.set_inheritable(master, False)
        os.set_inheritable(slave, False)
        set_size(master, rows, cols)
    except OSError:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


def take_controlling_tty() -> None:
    """In the child, after ``setsid`` and the dup2 of the slave onto 0, 1 and 2: make fd 0 the controlling tty."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def foreground_group(master: int) -> int | None:
    """The foreground process group of the pty's session, or None when it cannot be told."""
    try:
        pgrp = os.tcgetpgrp(master)
    except OSError:
        return None
    return pgrp if pgrp > 0 else None

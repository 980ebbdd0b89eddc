"""A Ctrl-C while a command is still starting (importing jax, flax, its modules) ends it in one line.

Python's default SIGINT handler raises ``KeyboardInterrupt`` wherever the interpreter is. While jax loads,
that is often inside jax's garbage-collection callback, and an exception raised in a gc callback is
printed as "Exception ignored" and dropped: the command then went on as if the key had not been pressed
(a ``felix-jax run`` interrupted in its first second ran to its end). Elsewhere in the imports it ended in
a long traceback. :func:`exit_on_interrupt` replaces the handler for that window with one that writes one
line and ends the process with status 130 (nothing has been run or written yet); the command's entry point
(:func:`felix_jax.cli.main`, :func:`felix_jax.commands.run_script`) calls :func:`restore_interrupts` first
thing, and the run's own handling (``experiment/stops.py``: stop after the current event) takes over from
there. Light on purpose: this module imports nothing heavy, so it can be installed before jax is.
"""

from __future__ import annotations

import os
import signal
import threading

EXIT_STATUS = 128 + signal.SIGINT


def _starting_handler(prog: str):
    def interrupted(signum, frame):  # noqa: ARG001 - a signal handler's signature
        try:
            os.write(2, f"{prog}: interrupted while starting; nothing was run\n".encode())
        finally:
            os._exit(EXIT_STATUS)

    interrupted.felix_jax_starting = True
    return interrupted


def exit_on_interrupt(prog: str) -> bool:
    """From now until :func:`restore_interrupts`, a SIGINT ends the process at once: one line ``PROG:
    interrupted while starting; nothing was run`` on stderr, exit status 130. Only in the main thread, and
    not where SIGINT is ignored (a job started in the background by a shell without job control keeps
    ignoring it). True when installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, _starting_handler(prog))
    return True


def restore_interrupts() -> None:
    """Python's own SIGINT handling (``KeyboardInterrupt``) again, where :func:`exit_on_interrupt`'s handler
    is installed; anything else is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        return
    if getattr(signal.getsignal(signal.SIGINT), "felix_jax_starting", False):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def is_entry(argv0: str, *names: str) -> bool:
    """True when the process was started as one of ``names`` (a console script's file name, with or
    without ``.exe``): the CLI package installs the handler only then, not when a program imports it."""
    base = os.path.basename(argv0 or "")
    return base.removesuffix(".exe") in names

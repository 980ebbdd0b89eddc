"""What every felix-jax command shares (host-only): the ``felix-jax`` subcommands and the scripts in
benchmarks/ report a user's mistake in one line, ``PROG: message``, with no traceback (the whole stack
on request: ``--traceback`` or ``FELIX_JAX_TRACEBACK=1``), and show a default beside every argument's
help. One reporter for all of them, as git's and cargo's subcommands share theirs.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import traceback
from typing import Any, Callable

from .fleet.lifecycle import UnsettledTaskError
from .fleet.simulator import PolicyError, RunFailed
from .fleet.snapshot import SnapshotError
from .options import OptionError
from .plugin_calls import PluginError
from .startup import restore_interrupts
from .traces import DataFileError

# what a run or its inputs may raise that is the user's to fix: reported in one line, no traceback
USER_ERRORS = (OSError, KeyError, DataFileError, OptionError, SnapshotError, PolicyError, UnsettledTaskError,
               PluginError, RunFailed)
TRACEBACK_ENV = "FELIX_JAX_TRACEBACK"


def one_line(e: BaseException) -> str:
    """The message of a user error, without the exception's repr noise (an OSError's errno), in the
    command line's words where the error has them (``cli_message``: ``FELIX_JAX_DATA``, not ``path=``)."""
    if getattr(e, "cli_message", None):
        return e.cli_message
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e.args[0]) if e.args else str(e) or type(e).__name__


def traceback_asked(flag: bool = False) -> bool:
    """``--traceback`` given, or ``FELIX_JAX_TRACEBACK`` set to a true value."""
    return flag or os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """A script's docstring as written, and ``(default: X)`` after every argument's help."""


def command_parser(description: str | None) -> argparse.ArgumentParser:
    """An argument parser for a felix-jax script: its description as written, defaults shown."""
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


def comma_list(text: str, what: str, convert: Callable[[str], Any] = str) -> list:
    """``"a, b,c"`` as ``[a, b, c]`` (empty items dropped), each through ``convert``; a ``ValueError``
    (one line naming ``what``) for an item it refuses."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    try:
        return [convert(x) for x in items]
    except ValueError:
        raise ValueError(f"{what} expects comma-separated {getattr(convert, '__name__', 'value')}s, "
                         f"got {text!r}") from None


def seed_list(text: str, what: str = "--seeds") -> list[int]:
    """``"0,1,2"`` as ``[0, 1, 2]``: a ``ValueError`` (one line naming ``what``) for a non-integer, for no
    seed at all and for a seed given twice (its runs would count twice in every mean and ratio)."""
    seeds = comma_list(text, what, int)
    if not seeds:
        raise ValueError(f"{what} expects at least one seed, got {text!r}")
    twice = next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)
    if twice is not None:
        raise ValueError(f"{what}: seed {twice} is given twice in {text!r}")
    return seeds


def phase_list(text: str | None, count: int, what: str = "--phases") -> list[int]:
    """A benchmark's ``--phases``: ``None`` as every phase ``0..count-1`` in order, else ``"0,2"`` as ``[0, 2]``;
    a ``ValueError`` (one line naming ``what`` and the phases there are) for a number with no phase."""
    chosen = list(range(count)) if text is None else comma_list(text, what, int)
    unknown = [p for p in chosen if not 0 <= p < count]
    if unknown:
        raise ValueError(f"{what} {text}: no phase {unknown[0]} (phases are 0-{count - 1})")
    return chosen


# argparse ``type=`` checkers: argparse reports a refused value as ``PROG: error: argument --OPTION: message``
# (naming the option) before the script does anything, and applies them only to values given as text: a
# default of ``None`` stays ``None`` (the script's own default applies), never a given 0 replaced by it.
def _positive(text: str, convert: Callable[[str], float], what: str) -> float:
    """``convert(text)`` when it is a finite number > 0, else argparse's error saying ``what`` it must be."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A count: an integer >= 1."""
    return _positive(text, int, "an integer >= 1")


def positive_float(text: str) -> float:
    """A time or a rate: a finite number > 0 (not inf, not NaN)."""
    return _positive(text, float, "a finite number > 0")


def output_file(text: str) -> str:
    """A file the script writes when it is done: refused now, not after hours of work, when its folder
    is missing or not writable or the path is a folder."""
    path = os.path.abspath(os.path.expanduser(text))
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text}: is a folder, not a file")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text}: no such folder {os.path.dirname(text) or folder}")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text}: not writable")
    return text


def parse_sets(items: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` items as a dict; a ``ValueError`` (one line) for an item without ``=``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def earlier_rows(path: str, script: str, option: str = "--out", purpose: str = "to --resume") -> list:
    """The rows a benchmark's earlier JSON holds (``option``'s file, read ``purpose``); a ``ValueError``
    naming the option, ``path`` and ``script`` for a file that is not such a JSON."""
    import json

    try:
        with open(path) as f:
            rows = json.load(f)["rows"]
    except (ValueError, KeyError, TypeError) as e:
        reason = f"no {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"{option} {path}: not a {script} JSON {purpose} ({reason})") from None
    if not isinstance(rows, list):
        raise ValueError(f"{option} {path}: not a {script} JSON {purpose} (its rows are not a list)")
    return rows


def run_script(prog: str, main: Callable[..., Any], argv: list[str] | None = None) -> Any:
    """Calls ``main(argv)``; a user error it raises (:data:`USER_ERRORS`, a ``ValueError``) ends the
    process with one line ``PROG: message`` and exit status 1 (its stack above it when asked for), and
    a Ctrl-C that the script does not handle itself with ``PROG: interrupted`` and status 130. A script that
    called :func:`felix_jax.startup.exit_on_interrupt` before its imports gets Python's SIGINT handling back
    here."""
    restore_interrupts()
    try:
        return main(argv)
    except KeyboardInterrupt as e:
        if traceback_asked():
            traceback.print_exception(e, file=sys.stderr)
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    except (*USER_ERRORS, ValueError) as e:
        if traceback_asked():
            traceback.print_exception(e, file=sys.stderr)
        raise SystemExit(f"{prog}: {one_line(e)}") from e

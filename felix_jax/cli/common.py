"""What every command shares (host-only): the errors that are the user's to fix, reported in one
line (the whole stack on request), ``--set`` parsing, the metric writers, the compilation cache and
the help layout."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

# what a run or its inputs may raise that is the user's to fix (USER_ERRORS): reported in one line, no
# traceback (the whole stack on request: --traceback or FELIX_JAX_TRACEBACK=1); shared with benchmarks/
from ..commands import TRACEBACK_ENV, USER_ERRORS, one_line  # noqa: F401
from ..commands import traceback_asked as _asked
from ..options import OptionError


def parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def user_path(text: str) -> Path:
    """A file or folder the user named on the command line, absolute (``~`` expanded, ``..`` taken out,
    relative to the working folder; symbolic links kept as named): what is joined, compared, recorded
    and printed from here on, so a printed command works as printed from any folder."""
    return Path(os.path.abspath(os.path.expanduser(text)))


def traceback_asked(args: argparse.Namespace) -> bool:
    """Whether the whole stack of an error was asked for (``--traceback`` or ``FELIX_JAX_TRACEBACK``)."""
    return _asked(bool(getattr(args, "traceback", False)))


def metric_writers(args: argparse.Namespace, command: str) -> tuple:
    """``--log-to``: the metric writers, or one line naming the extra to install (before any work)."""
    from ..experiment.writers.feed import make_writers

    try:
        return make_writers(args.log_to)
    except OptionError as e:
        raise SystemExit(f"felix-jax {command}: {one_line(e)}")


def enable_cache(command: str) -> None:
    """The persistent XLA cache, or one line naming its folder when that cannot be used."""
    from ..compile_cache import enable_compilation_cache

    try:
        enable_compilation_cache()
    except OSError as e:
        raise SystemExit(f"felix-jax {command}: {one_line(e)}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows each option's default and keeps the examples' line breaks; an option whose help
    says its default itself, or whose default is None or a flag's False, gets no "(default: ...)"."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def add_traceback_flag(command: argparse.ArgumentParser) -> None:
    """``--traceback``: with an error, its whole stack above the one-line message."""
    command.add_argument("--traceback", action="store_true",
                         help=f"with an error, print its whole stack above the one-line message (or set "
                              f"{TRACEBACK_ENV}=1)")

"""How much memory this machine can give a run (host-only helper).

A few inputs decide an allocation's size directly (a client count, a stream's arrival
rate): a value far past what the machine holds would otherwise run until the kernel
kills the process, or stall in swap. ``check_fits`` refuses such a value before anything
is allocated, in one line that says the estimate, the limit and where the limit comes from.
"""

from __future__ import annotations

import os

from .options import OptionError

GB = 1024 ** 3


def available_bytes() -> int | None:
    """Memory available to a new allocation: ``MemAvailable`` of ``/proc/meminfo`` (Linux), else the
    physical memory (``sysconf``); None when neither is known (then nothing is refused)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_fits(need_bytes: float, setting: str, what: str) -> None:
    """Raises OptionError naming ``setting`` when ``need_bytes`` (an estimate of ``what``) exceeds the
    memory available now."""
    have = available_bytes()
    if have is not None and need_bytes > have:
        raise OptionError(f"{setting}: {what} would take about {need_bytes / GB:,.1f} GB, more than the "
                          f"{have / GB:,.1f} GB of memory available on this machine (MemAvailable); "
                          "lower it or run on a larger machine")

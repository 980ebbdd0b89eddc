"""How much memory this machine can give a run, and how much this process holds (host-only helper).

A few inputs decide an allocation's size directly (a client count, a stream's arrival
rate): a value far past what the machine holds would otherwise run until the kernel
kills the process, or stall in swap. ``check_fits`` refuses such a value before anything
is allocated, in one line that says the estimate, the limit and where the limit comes from.
:func:`resident_bytes` and :func:`peak_resident_bytes` read what the process holds (the memory budget's
runtime share is measured with the first, a run's peak against its budget with the second).
"""

from __future__ import annotations

import os
import time

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


def _status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (Linux) in bytes; None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def resident_bytes() -> int | None:
    """This process's resident memory now (``VmRSS``); None where it cannot be read."""
    return _status_bytes("VmRSS")


def peak_resident_bytes() -> int | None:
    """This process's peak resident memory since it started or since :func:`reset_peak_resident`
    (``VmHWM``); elsewhere than Linux ``getrusage``'s ``ru_maxrss`` (since the start); None if neither."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
        import sys

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024  # bytes on macOS, kB on Linux
    except (ImportError, OSError, ValueError):
        return None


def reset_peak_resident() -> bool:
    """Sets the peak (``VmHWM``) to the resident memory now, so that :func:`peak_resident_bytes` reads
    the peak from here on (a run's, in a process that ran others first); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class FreeMemoryRelease:
    """Hands the C allocator's free memory back to the system, at most every ``interval_s`` seconds of
    wall time (:meth:`tick`, called by the simulator at each aggregation).

    A long run allocates and frees numpy temporaries of many sizes; glibc's malloc keeps what they
    freed in its arenas, so the resident memory of a run at 10^4 tasks in flight crept up by about
    0.5-1 MB an aggregation with nothing live behind it (BENCHMARKS.md, "Memory over a fleet day").
    ``malloc_trim(0)`` returns those pages. It changes no result, only what the process holds; it
    costs milliseconds, hence the interval. Elsewhere than glibc it does nothing.
    """

    def __init__(self, interval_s: float = 10.0):
        self.interval_s = float(interval_s)
        self.calls = 0
        self._last = time.perf_counter()
        self._trim = _malloc_trim()

    def tick(self) -> bool:
        """Trims if the interval has passed since the last trim (or the start); True if it did."""
        if self._trim is None or time.perf_counter() - self._last < self.interval_s:
            return False
        self._trim(0)
        self.calls += 1
        self._last = time.perf_counter()
        return True


def _malloc_trim():
    """glibc's ``malloc_trim``, or None where there is none."""
    try:
        import ctypes

        fn = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn

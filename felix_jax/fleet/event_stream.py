"""A run's per-event log written as the run goes: ``events.csv`` in bounded chunks (host side).

The simulator logs some rows ahead of their time (a task's future start, its client's departure
and return are known at its dispatch), yet ``events.csv`` is in time order, ties in the order
they were logged (docs/results.md). A row is therefore *released* only once the clock has
reached its time: a row logged ahead waits in a heap keyed by (time, order logged), at most
four a task in flight (start, leave, return, partial). Released rows collect in a chunk of at most
``chunk_rows`` rows, then are appended to the file and flushed to the operating system: a run killed
at any moment (``kill -9`` included) holds every row up to its last written chunk.

Why the order comes out right: every row is logged at a time no earlier than the clock's, and the
clock never goes back while the run goes on. So once the clock is at ``now``, no row logged later
can sort before a released row with time ``<= now``: releasing the waiting rows with time
``<= now`` in (time, order) order, then the rows logged at ``now`` as they come, writes the file
that sorting every row by time would (:func:`felix_jax.experiment.event_log.write_event_log`).

A snapshot holds the file's length, its row count and last line, and the rows still waiting,
never the written rows; resuming cuts the file back to that length. A test checkpoint marks the
same three (:meth:`EventStream.mark`); a stop rule that finds its target at a checkpoint the
run has gone past cuts the file back to it (:meth:`EventStream.rollback`).
"""

from __future__ import annotations

import csv
import heapq
import io
import os
from pathlib import Path

EVENT_COLUMNS = ("time_s", "event", "client", "kind", "version", "staleness", "weight", "tier")
CHUNK_ROWS = 4096  # rows held in memory before they are appended to the file (about 0.3 MB)


class EventLogFileError(ValueError):
    """An ``events.csv`` that cannot continue a snapshot's run (shorter than the snapshot says, or
    not ending where it did); the message is one line naming the file."""


def csv_text(rows) -> str:
    """``rows`` as ``events.csv`` lines: the csv module's dialect (CRLF; ``None`` as an empty field)."""
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def _last_line(text: str) -> str:
    return text[text.rfind("\n", 0, len(text) - 1) + 1:]


class EventStream:
    """Rows of one run's log, released in time order and appended to ``path`` in chunks.

    ``state``: a snapshot's :meth:`state_dict` to continue from (the file is cut back to the
    length it records); ``earlier_rows``: rows a snapshot held in memory instead (one written
    before the log was streamed, or by a run without a results folder), in the order logged, at
    clock ``now``: written as the run would have written them.
    """

    def __init__(self, path: str | Path, chunk_rows: int = CHUNK_ROWS, state: dict | None = None,
                 earlier_rows: list | None = None, now: float = 0.0):
        if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
            raise ValueError(f"event log: chunk_rows must be an integer >= 1, got {chunk_rows!r}")
        self.path = Path(path)
        self.chunk_rows = chunk_rows
        self._chunk: list[tuple] = []  # released rows not written yet
        self._waiting: list[tuple] = []  # heap of (time, order, row): rows logged ahead of their time
        self._order = 0  # rows logged so far (a row's place among rows of equal time)
        if state is None:
            self._file = open(self.path, "wb")
            header = csv_text([EVENT_COLUMNS])
            self._file.write(header.encode())
            self._file.flush()
            self.bytes, self.rows, self._tail = len(header), 0, header
            for row in earlier_rows or ():
                self._hold(row)
            self.release(now)
        else:
            self._file = self._reopen(int(state["bytes"]), str(state["tail"]))
            self.bytes, self.rows, self._tail = int(state["bytes"]), int(state["rows"]), str(state["tail"])
            self._order = int(state["order"])
            self._waiting = [(float(r[0]), int(o), tuple(r)) for o, r in zip(state["waiting_order"],
                                                                             state["waiting"])]
            heapq.heapify(self._waiting)

    def _reopen(self, length: int, tail: str):
        """The file, cut back to ``length`` bytes once it is checked to end there with ``tail``."""
        try:
            f = open(self.path, "r+b")
        except FileNotFoundError:
            raise EventLogFileError(f"{self.path} is missing: the snapshot's run wrote {length:,} bytes of it "
                                    "(restore it, or rerun with --overwrite)") from None
        size = os.fstat(f.fileno()).st_size
        end = b""
        if size >= length:
            f.seek(length - len(tail))
            end = f.read(len(tail))
        if end != tail.encode():
            f.close()
            raise EventLogFileError(f"{self.path} does not hold the snapshot's rows ({size:,} bytes; the snapshot "
                                    f"expects {length:,} ending with its last row): it is not this run's log "
                                    "(rerun with --overwrite)")
        f.truncate(length)
        f.seek(length)
        return f

    # ------------------------------------------------------------- logging
    def append(self, row: tuple, now: float) -> None:
        """Logs ``row`` (its time first) at clock ``now``: released now if its time has come, else held."""
        if row[0] > now:
            self._hold(row)
            return
        if self._waiting and self._waiting[0][0] <= now:
            self.release(now)
        self._order += 1
        self._chunk.append(row)
        if len(self._chunk) >= self.chunk_rows:
            self.write_chunk()

    def _hold(self, row: tuple) -> None:
        heapq.heappush(self._waiting, (float(row[0]), self._order, row))
        self._order += 1

    def release(self, now: float) -> None:
        """Moves the held rows whose time is ``<= now`` to the chunk, in time order (then order logged)."""
        while self._waiting and self._waiting[0][0] <= now:
            self._chunk.append(heapq.heappop(self._waiting)[2])
            if len(self._chunk) >= self.chunk_rows:
                self.write_chunk()

    def write_chunk(self) -> None:
        """Appends the chunk to the file and flushes it to the operating system."""
        if not self._chunk:
            return
        text = csv_text(self._chunk)
        self._file.write(text.encode())
        self._file.flush()
        self.bytes += len(text)  # ASCII: one byte a character
        self.rows += len(self._chunk)
        self._tail = _last_line(text)
        self._chunk.clear()

    def flush(self, now: float) -> None:
        """Every row with time ``<= now`` to the file (rows held for later stay held)."""
        self.release(now)
        self.write_chunk()

    @property
    def waiting(self) -> int:
        """Rows held for a later time (at most four a task in flight)."""
        return len(self._waiting)

    # ------------------------------------------------------ marks, snapshots
    def mark(self, now: float) -> tuple:
        """The log at clock ``now`` (every row up to it written): :meth:`rollback` returns to it."""
        self.flush(now)
        return self.bytes, self.rows, self._tail, self._order

    def rollback(self, mark: tuple) -> None:
        """Back to a :meth:`mark`: rows logged since are cut from the file and from the held rows."""
        length, rows, tail, order = mark
        self._chunk.clear()
        self._file.truncate(length)
        self._file.seek(length)
        self._file.flush()
        self.bytes, self.rows, self._tail = length, rows, tail
        self._waiting = [w for w in self._waiting if w[1] < order]
        heapq.heapify(self._waiting)

    def state_dict(self, now: float) -> dict:
        """What a snapshot holds of the log at clock ``now``: the written file's length, row count and
        last line, and the rows held for later (with their order); the written rows stay in the file."""
        self.flush(now)
        held = sorted(self._waiting)
        return {"bytes": self.bytes, "rows": self.rows, "tail": self._tail, "order": self._order,
                "waiting": [w[2] for w in held], "waiting_order": [w[1] for w in held]}

    def close(self) -> None:
        """Writes the chunk and closes the file (the rows held for later are not written)."""
        if self._file is not None:
            self.write_chunk()
            self._file.close()
            self._file = None

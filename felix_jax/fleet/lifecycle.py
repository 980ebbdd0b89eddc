"""When does a task finish, given the client's availability trace?

A task needs ``work_s`` seconds of time in an allowed tier (AVL_TRAIN for
training; AVL_TRAIN or AVL_EVAL for eval). Dispatched at ``t0`` it waits until
the client is in an allowed tier, runs, and when the client leaves the tier it is
interrupted: ``resume`` continues where it stopped when the client returns (the
paper: a trainer checkpoints), ``restart`` starts over, ``abandon`` drops it. ``run_to_end`` is the FeLiX
reference code's lifecycle (the paper's reference settings "TierTrack"): the task waits for an
allowed tier, then runs to completion even if the client leaves meanwhile (it is
never pre-empted; ``first_stop_s`` still records when the client left, which a
TierTrack server is told about). ``run_to_end_hold`` is the FeLiX code with client notifications on
(HT:303-317): as ``run_to_end``, but a finished update is held while the client is UN_AVL and sent
when it is back (in AVL_TRAIN or AVL_EVAL). ``partial`` is FedProx's acceptance of partial work
(Li et al., MLSys 2020, Sec. 3: a device may solve its local problem inexactly): when the client
leaves, the task stops and its client sends the update of the local steps it finished
(:func:`partial_work` says how many, and when the update arrives).
Because a task's *result* depends only on (start model, client data, key), the
timeline is computed once at dispatch and only decides *when* things happen.
"""

from __future__ import annotations

import dataclasses
import enum
import math

from ..traces import AvailabilityTrace, Tier

_UN_AVL = int(Tier.UN_AVL)


class Interruption(str, enum.Enum):
    RESUME = "resume"
    RESTART = "restart"
    ABANDON = "abandon"
    RUN_TO_END = "run_to_end"
    RUN_TO_END_HOLD = "run_to_end_hold"
    PARTIAL = "partial"


class UnsettledTaskError(RuntimeError):
    """A client's availability trace changes tier so often that a task cannot settle (finish, or be
    given up) within the walk's limit of state changes: a trace far finer than the tasks it schedules.
    One line naming the client, the task and the limit."""


def _unsettled(client: int, t0: float, work_s: float | None, max_changes: int) -> UnsettledTaskError:
    task = f"a {work_s:g} s task" if work_s is not None else "a finished update"
    return UnsettledTaskError(
        f"client {client}: its availability trace changed tier {max_changes:,} times from t={t0:g} s without "
        f"{task} settling (task did not settle within {max_changes} state changes): the trace changes state "
        "faster than a task can run; use a coarser trace (or one that repeats with a longer period)")


@dataclasses.dataclass(frozen=True)
class Timeline:
    """The hand-computable life of one task."""

    start_s: float  # first moment it ran (inf if never)
    finish_s: float  # completion time (inf if never: abandoned, or the client never returns)
    first_stop_s: float  # first interruption (inf if none)
    interruptions: int
    abandoned: bool = False
    # partial: seconds the task had run when its client left (inf: it was not cut short); its finish_s is
    # then that departure, before partial_work adds the upload
    worked_s: float = math.inf


def task_timeline(trace: AvailabilityTrace, client: int, t0: float, work_s: float, allowed: frozenset[int],
                  policy: Interruption = Interruption.RESUME, horizon_s: float = math.inf,
                  max_changes: int = 100_000) -> Timeline:
    """Walks the client's state changes from ``t0`` until ``work_s`` of allowed time accrue."""
    if work_s < 0:
        raise ValueError(f"work_s must be >= 0, got {work_s}")
    t = float(t0)
    state = trace.state_of(t, client)
    remaining = float(work_s)
    start = first_stop = math.inf
    interruptions = 0
    for _ in range(max_changes):
        nt, ns = trace.next_change_of(t, client)
        if state in allowed and policy in (Interruption.RUN_TO_END, Interruption.RUN_TO_END_HOLD):
            finish = t + remaining
            first_stop = first_leave(trace, client, t, finish, allowed)
            if policy is Interruption.RUN_TO_END_HOLD:
                finish = _first_present(trace, client, finish, horizon_s, max_changes)
            return Timeline(t, finish, first_stop, 0)
        if state in allowed:
            start = min(start, t)
            if t + remaining <= nt:
                return Timeline(start, t + remaining, first_stop, interruptions)
            if ns not in allowed:  # interrupted at nt
                interruptions += 1
                first_stop = min(first_stop, nt)
                if policy is Interruption.ABANDON:
                    return Timeline(start, math.inf, first_stop, interruptions, abandoned=True)
                if policy is Interruption.PARTIAL:
                    return Timeline(start, nt, first_stop, interruptions, worked_s=float(work_s) - remaining + (nt - t))
                remaining = float(work_s) if policy is Interruption.RESTART else remaining - (nt - t)
            else:
                remaining -= nt - t
        if nt == math.inf or nt > horizon_s:
            return Timeline(start, math.inf, first_stop, interruptions)
        t, state = nt, ns
    raise _unsettled(client, t0, work_s, max_changes)


def partial_work(timeline: Timeline, num_steps: int, download_s: float, compute_s: float,
                 upload_s: float) -> tuple[Timeline, int]:
    """What a task cut short by its client's departure (``interruption=partial``) sends, and when.

    A training task runs its three phases back to back: the download (``download_s``), the local
    computation (``compute_s``: the profile's per-task delay and per-sample cost, and any reading
    overhead) and the upload. Its ``num_steps`` local steps share the computation evenly, so step
    ``i`` (1-based) is done ``download_s + i * compute_s / num_steps`` seconds into the task's running
    time. Cut after ``worked_s`` seconds (``timeline.worked_s``), it has finished
    ``k = floor((worked_s - download_s) * num_steps / compute_s)`` steps, clipped to
    ``[0, num_steps]`` (all of them if the computation takes no time and the download is done). Its
    client then uploads the update of those ``k`` steps, which reaches the server ``upload_s`` after
    the departure (a full update if it left while uploading: it starts the upload again). With
    ``k = 0`` there is nothing to send: the task is abandoned, as under ``abandon``.

    Returns the task's timeline (its finish the update's arrival, or abandoned) and ``k``. A timeline
    that was not cut short comes back as it is, with ``num_steps``.
    """
    if not math.isfinite(timeline.worked_s):
        return timeline, num_steps
    computed = timeline.worked_s - download_s
    if compute_s > 0:
        done = math.floor(computed * num_steps / compute_s + 1e-9)  # 1e-9: a departure exactly at a step's end
    else:
        done = num_steps if computed >= 0 else 0
    done = min(max(done, 0), num_steps)
    if done == 0:
        return dataclasses.replace(timeline, finish_s=math.inf, abandoned=True), 0
    return dataclasses.replace(timeline, finish_s=timeline.finish_s + upload_s), done


def first_leave(trace: AvailabilityTrace, client: int, t: float, until: float, allowed: frozenset[int]) -> float:
    """The first time in (t, until) the client moves to a tier outside ``allowed`` (inf if none)."""
    while True:
        nt, ns = trace.next_change_of(t, client)
        if nt >= until:
            return math.inf
        if ns not in allowed:
            return nt
        t = nt


def first_return(trace: AvailabilityTrace, client: int, t: float, until: float, allowed: frozenset[int],
                 max_changes: int = 100_000) -> float:
    """The first time in (t, until] the client is back in an ``allowed`` tier (inf if not)."""
    for _ in range(max_changes):
        if not t < until:
            break
        t, state = trace.next_change_of(t, client)
        if state in allowed:
            return t if t <= until else math.inf
    return math.inf


def _first_present(trace: AvailabilityTrace, client: int, t: float, horizon_s: float, max_changes: int) -> float:
    """The first time >= t the client is not UN_AVL (inf if not back within ``horizon_s``)."""
    t0, state = t, trace.state_of(t, client)
    for _ in range(max_changes):
        if state != _UN_AVL:
            return t
        t, state = trace.next_change_of(t, client)
        if t == math.inf or t > horizon_s:
            return math.inf
    raise _unsettled(client, t0, None, max_changes)

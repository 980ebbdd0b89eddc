"""``felix-jax plot-trace``: an availability trace's tiers over time, for a trace file or a named
regime (host side).

One figure: the shares of clients in ``AVL_TRAIN`` / ``AVL_EVAL`` / ``UN_AVL`` over time, stacked
(fractions of all clients), above a raster of every client's tier over time (client id against
hours, colored by tier; a fleet of more than ``MAX_RASTER_CLIENTS`` clients shows that many,
evenly spaced).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...traces import AvailabilityTrace, Tier
from ..cells import regime_label
from ..registry import TRACE_FILE_LOADERS, is_file_name, make_trace
from .style import FONT_L, FONT_M, GRID_ALPHA, pyplot, save

TIER_COLORS = {Tier.AVL_TRAIN: "tab:green", Tier.AVL_EVAL: "tab:orange", Tier.UN_AVL: "lightgrey"}
DEFAULT_CLIENTS = 100  # a synthetic regime's clients when none are asked for
DEFAULT_HOURS = 24.0  # a synthetic regime's span (the paper's 144 slots of 600 s), or a constant trace's
MAX_RASTER_CLIENTS = 300
TIME_POINTS = 600


def default_out(spec: str) -> Path:
    """``<name>-trace.png`` in the current folder: a file by its stem, ``ref:NAME`` as ``ref_NAME``."""
    name = Path(spec).stem if is_file_name(spec) else spec.replace(":", "_")
    return Path(f"{name}-trace.png")


def _own_clients(spec: str) -> int:
    """How many clients a trace file or shared reference trace holds itself."""
    if spec.startswith("ref:"):
        from ...traces import load_reference_trace

        return load_reference_trace(spec[4:]).num_clients
    suffix = Path(spec).suffix.lower()
    if suffix not in TRACE_FILE_LOADERS:
        raise KeyError(f"availability file {spec!r}: unknown extension {suffix!r}; "
                       f"known: {', '.join(TRACE_FILE_LOADERS)}")
    return TRACE_FILE_LOADERS[suffix](spec).num_clients


def trace_for_plot(spec: str, clients: int | None = None, seed: int = 0, slot_s: float = 600.0,
                   hours: float | None = None) -> tuple[AvailabilityTrace, float]:
    """The trace a run on ``spec`` would see (:func:`~felix_jax.experiment.registry.make_trace`)
    and the hours to draw. A file or ``ref:NAME`` keeps its own clients unless ``clients`` is given
    (then cycled, as a run does) and spans its recorded duration; a synthetic regime has
    ``DEFAULT_CLIENTS`` clients and spans ``DEFAULT_HOURS`` unless told otherwise."""
    recorded = spec.startswith("ref:") or is_file_name(spec)
    if clients is not None and clients < 1:
        raise ValueError(f"--clients {clients}: must be >= 1")
    if hours is not None and not (np.isfinite(hours) and hours > 0):
        raise ValueError(f"--hours {hours}: must be a finite number > 0")
    n = clients if clients is not None else (_own_clients(spec) if recorded else DEFAULT_CLIENTS)
    horizon_s = (hours if hours is not None else DEFAULT_HOURS) * 3600
    trace = make_trace(spec, n, seed, slot_s, horizon_s)
    if hours is None:
        hours = trace.duration_s / 3600 if recorded and trace.duration_s > 0 else DEFAULT_HOURS
    return trace, float(hours)


def plot_trace(spec: str, out: str | Path | None = None, clients: int | None = None, seed: int = 0,
               slot_s: float = 600.0, hours: float | None = None) -> Path:
    """Draws ``spec``'s tiers over time to ``out`` (default :func:`default_out`); returns the path."""
    plt = pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    trace, span_h = trace_for_plot(spec, clients, seed, slot_s, hours)
    out = default_out(spec) if out is None else Path(out)
    n = trace.num_clients
    times = np.linspace(0.0, span_h * 3600, TIME_POINTS)
    order = [Tier.AVL_TRAIN, Tier.AVL_EVAL, Tier.UN_AVL]
    shares = [trace.fraction_in_state(tier, times) for tier in order]
    shown = np.unique(np.linspace(0, n - 1, min(n, MAX_RASTER_CLIENTS)).round().astype(np.int64))
    raster = trace.state_at(times[:, None], shown[None, :]).T  # (clients shown, time) tier codes

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.2), sharex=True, height_ratios=(1, 1.6))
    top.stackplot(times / 3600, shares, colors=[TIER_COLORS[t] for t in order], labels=[t.name for t in order])
    top.set_ylim(0, 1)
    top.set_xlim(0, span_h)
    top.set_ylabel("share of clients (fraction)")
    top.set_xlabel("hours")
    top.tick_params(labelbottom=True)  # shared with the raster, labelled on both
    top.grid(alpha=GRID_ALPHA)
    cmap = ListedColormap([TIER_COLORS[Tier(code)] for code in range(3)])  # indexed by tier code 0, 1, 2
    bottom.imshow(raster, aspect="auto", interpolation="nearest", cmap=cmap, vmin=-0.5, vmax=2.5,
                  extent=(0.0, span_h, shown[-1] + 0.5, shown[0] - 0.5))
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("hours")
    bottom.set_ylabel("client id" if len(shown) == n else f"client id ({len(shown)} of {n}, evenly spaced)")
    title = f"{regime_label(spec)}: {n} clients"
    if not (spec.startswith("ref:") or is_file_name(spec)) and spec != "avail100":
        title += f", slots of {slot_s:g} s, seed {seed}"
    train = shares[0]
    top.set_title(f"{title}; AVL_TRAIN share mean {np.mean(train):.2f} (min {np.min(train):.2f}, "
                  f"max {np.max(train):.2f})", fontsize=FONT_L)
    fig.tight_layout()
    fig.legend([Patch(color=TIER_COLORS[t]) for t in order],
               ["AVL_TRAIN (can train)", "AVL_EVAL (can only evaluate)", "UN_AVL (away)"],
               loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=FONT_M, frameon=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, out)

"""``felix-jax report DIR1 DIR2 ...``: several results folders, run folders or comparisons, overlaid on
one self-contained page: every run's test accuracy against virtual hours in one figure (a color per
folder, a line style per run within it) and a table of every run (its folder, strategy, regime, seed,
data set, hours to target, final accuracy, bytes in the unit that fits, stop reason)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .cells import regime_label
from .naming import recorded_strategy_label
from .report_html import STYLE, ReportError, _e, _img, _num, _read_json, is_compare_folder, is_run_folder, \
    not_a_results_folder
from .report_run import data_text
from .results import read_metrics_csv

OVERLAY_FILE = "overlay-report.html"


def overlay_runs(folders: list[Path]) -> list[dict]:
    """Every run of ``folders``, in order: a run folder is one, a comparison gives its summary.csv's runs."""
    from .tables import rows_from_summary_csv

    runs = []
    for folder in folders:
        if is_run_folder(folder):
            dirs = [folder]
        elif is_compare_folder(folder):
            dirs = [Path(r["run_dir"]) for r in rows_from_summary_csv(folder)]
        else:
            raise ReportError(not_a_results_folder(folder))
        for d in dirs:
            if not (d / "metrics.csv").is_file():
                continue  # a comparison's cell folder that is gone: the comparison's own page says so
            config = _read_json(d / "config.json")
            sc = config.get("scenario", {})
            runs.append({"source": folder, "run_dir": d, "config": config, "summary": _read_json(d / "summary.json"),
                         "label": f"{recorded_strategy_label(config) or '?'} | "
                                  f"{regime_label(str(sc.get('availability', '')))} | "
                                  f"seed {sc.get('seed', '?')}"})
    if not runs:
        raise ReportError(f"{', '.join(map(str, folders))}: no run with a metrics.csv to overlay")
    return runs


def _overlay_figure(runs: list[dict], path: Path) -> Path:
    from .figures.style import FONT_S, GRID_ALPHA, legend_below, palette, pyplot, save

    plt = pyplot()
    sources = list(dict.fromkeys(r["source"] for r in runs))
    names = {s: s.resolve().name for s in sources}
    fig, ax = plt.subplots(figsize=(10, 4.5))
    styles = ("-", "--", ":", "-.")
    handles, labels = [], []
    within: dict = {}
    for r in runs:
        cps = read_metrics_csv(r["run_dir"] / "metrics.csv")
        k = within.setdefault(r["source"], 0)
        within[r["source"]] += 1
        (line,) = ax.plot([c.time_s / 3600 for c in cps], [c.accuracy for c in cps], lw=1.2,
                          color=palette(sources.index(r["source"])), ls=styles[k % len(styles)])
        handles.append(line)
        labels.append(f"{names[r['source']]}: {r['label']}")
    ax.set_xlabel("virtual hours")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=GRID_ALPHA)
    fig.tight_layout()
    legend_below(fig, handles, labels, fontsize=FONT_S)
    return save(fig, path)


def render_overlay_report(folders: list[str | Path]) -> str:
    from .units import bytes_text

    folders = [Path(f) for f in folders]
    runs = overlay_runs(folders)
    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             f"<title>felix-jax: {len(runs)} runs from {len(folders)} folders</title>",
             f"<style>{STYLE}</style></head><body>",
             f"<h1>felix-jax: {len(runs)} runs from {len(folders)} folders</h1>",
             f"<p class='meta'>{_e('; '.join(str(f.resolve()) for f in folders))}; written "
             f"{_e(time.strftime('%Y-%m-%d %H:%M'))}</p>", "<h2>Test accuracy</h2>"]
    with tempfile.TemporaryDirectory() as tmp:
        parts.append(f"<figure>{_img(_overlay_figure(runs, Path(tmp) / 'overlay.png'), 'overlay')}<figcaption>"
                     "Every run's test accuracy against virtual hours: a color per folder, a line style per run "
                     "within it.</figcaption></figure>")
    head = ("folder", "run", "data", "hours to target", "final accuracy", "bytes total", "stop reason")
    parts.append("<h2>Every run</h2><table id='runs'><thead><tr>" + "".join(
        f"<th class='l'>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>")
    for r in runs:
        s = r["summary"]
        parts.append("<tr>" + "".join(f"<td class='l'>{_e(v)}</td>" for v in (
            r["source"].resolve().name, r["label"], data_text(r["config"].get("scenario", {})),
            _num(s.get("time_to_target_h")), _num(s.get("final_accuracy")), bytes_text(s.get("bytes_total")),
            s.get("stop_reason", "(not finished)"))) + "</tr>")
    parts += ["</tbody></table>", "</body></html>"]
    return "\n".join(parts) + "\n"

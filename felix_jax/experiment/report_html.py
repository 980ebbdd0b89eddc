"""What the report pages share (report.py: a comparison's, report_run.py: a run's, report_overlay.py:
several folders'): the style sheet, HTML escaping, numbers, embedded images, JSON read leniently,
and which folder is which."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from .tables import sig


class ReportError(ValueError):
    """The folder is not a comparison's (one line)."""


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return sig(float(value), digits)


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}">'


def _json_pre(value) -> str:
    return f"<pre>{_e(json.dumps(value, indent=2, default=str))}</pre>"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 1.5em auto;
       max-width: 1400px; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.meta { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #d0d0d0; padding: 0.25em 0.5em; text-align: right; vertical-align: top; }
th { background: #f2f2f2; } td.l, th.l { text-align: left; }
tr.ref td { background: #f5f9ff; }
.warnings { background: #fff6e0; border: 1px solid #e0b040; padding: 0.5em 1em; }
.warnings li { margin: 0.2em 0; }
.ok { background: #eef8ee; border: 1px solid #8c8; padding: 0.5em 1em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.85em; }
pre { background: #f7f7f7; padding: 0.6em; font-size: 0.8em; white-space: pre-wrap; overflow-wrap: anywhere; }
details { margin: 0.4em 0; } summary { cursor: pointer; }
.cells img { max-width: 48%; margin-right: 1%; }
"""


def is_compare_folder(folder: Path) -> bool:
    return (folder / "summary.csv").is_file() and (folder / "runs").is_dir()


def is_run_folder(folder: Path) -> bool:
    return (folder / "metrics.csv").is_file() and (folder / "config.json").is_file()


def not_a_results_folder(folder: Path) -> str:
    """The one line for a folder no page can be made of."""
    if not folder.exists():
        return f"{folder}: no such folder"
    if not folder.is_dir():
        return f"{folder}: not a folder"
    return (f"{folder} is not a results folder: a run's holds metrics.csv and config.json, a comparison's "
            "summary.csv and runs/")

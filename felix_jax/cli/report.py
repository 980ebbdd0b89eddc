"""``felix-jax report``: one self-contained HTML page of a comparison (host-only)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import USER_ERRORS, one_line

def _report(args: argparse.Namespace) -> int:
    from ..experiment.report import ReportError, write_report

    try:
        path = write_report(Path(args.dir), args.out)
    except (*USER_ERRORS, ReportError, ValueError) as e:
        raise SystemExit(f"felix-jax report: {one_line(e)}")
    print(f"wrote {path}")
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``report`` command and its options."""
    report = sub.add_parser("report", help="one self-contained HTML page of a comparison: table, figures, "
                                           "settings, warnings")
    report.add_argument("dir", help="a compare folder (summary.csv and runs/)")
    report.add_argument("--out", help="the page (default DIR/report.html)")
    report.set_defaults(func=_report)
    return report

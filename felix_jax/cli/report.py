"""``felix-jax report``: one self-contained HTML page of a comparison (host-only)."""

from __future__ import annotations

import argparse

from .common import USER_ERRORS, one_line, user_path

def _report(args: argparse.Namespace) -> int:
    from ..experiment.report import ReportError, write_report

    try:
        # every path absolute at the edge: the page names its folders, the overlay's default is the working folder
        path = write_report([user_path(d) for d in args.dir], None if args.out is None else user_path(args.out))
    except (*USER_ERRORS, ReportError, ValueError) as e:
        raise SystemExit(f"felix-jax report: {one_line(e)}")
    print(f"wrote {path}")
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``report`` command and its options."""
    report = sub.add_parser("report", help="one self-contained HTML page of a comparison or a run (table, "
                                           "figures, the split, settings, warnings), or of several overlaid")
    report.add_argument("dir", nargs="+", help="a compare folder (summary.csv and runs/) or a run folder "
                                               "(metrics.csv); several: their runs overlaid on one page")
    report.add_argument("--out", help="the page (default DIR/report.html; several folders: overlay-report.html)")
    report.set_defaults(func=_report)
    return report

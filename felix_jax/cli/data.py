"""``felix-jax data``: what real data is here and what needs it (``list``), getting a data set from its
canonical public archive (``fetch``), and rebuilding the paper's traces from their public source
(``build-traces``). Host-only."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import USER_ERRORS, HelpFormatter, add_traceback_flag, one_line, user_path

DATA_EXAMPLES = """examples:
  felix-jax data list                              # what is here, where, and which presets need what
  felix-jax data fetch cifar10                     # the canonical archive (170 MB), checked and decoded once
  felix-jax data fetch cifar10 --from ~/Downloads/cifar-10-binary.tar.gz   # a copy you already have
  felix-jax data fetch speech_commands             # the official test set (113 MB), converted once
  felix-jax data build-traces --from flame/        # the paper's traces from the authors' trainer configs

Where data goes: $FELIX_JAX_DATA when set, else data/ in the user cache ($FELIX_JAX_CACHE, else
~/.cache/felix_jax on Linux). The paper's traces and the FLASH device files ship with felix-jax."""


def _needed_by() -> dict[str, list[str]]:
    """data set -> the presets and regimes that read it."""
    from ..experiment import PRESETS
    from ..experiment.inputs import data_needed

    out: dict[str, list[str]] = {}
    for name, sc in PRESETS.items():
        for ds in data_needed(sc):
            out.setdefault(ds, []).append(name)
    out.setdefault("reference_traces", []).extend(["regimes ref:NAME and mobiperf", "device_profile=reference",
                                                   "partition=reference"])
    out.setdefault("flash", []).append("device_profile=flash")
    out.setdefault("cifar10", []).append("dataset=cifar10")
    out.setdefault("speech_commands", []).append("dataset=speech_commands, speech_commands35")
    return out


def _list(args: argparse.Namespace) -> int:
    from ..data import catalog
    from ..data.download import size_text
    from ..traces.data_paths import DATA_ENV_VAR, SHIPPED_DIR, data_home

    home, source = data_home()
    print(f"data home: {home} ({'from ' + DATA_ENV_VAR if source == DATA_ENV_VAR else source}"
          f"{'' if home.is_dir() else '; not created yet'})")
    needed = _needed_by()
    rows = []
    for name, ds in catalog.DATA_SETS.items():
        found = catalog.locate(name)
        if found is None:
            rows.append((name, "missing", f"{size_text(ds.archive.size)} to fetch", f"`{catalog.fetch_command(name)}`"))
            continue
        files = [found.parent / Path(f).name for f in ds.files] if len(ds.files) > 1 and ds.shipped else [found]
        size = sum(p.stat().st_size for p in files if p.is_file())
        state = "shipped" if found.parent == SHIPPED_DIR else "present"
        rows.append((name, state, size_text(size), str(found.parent if len(files) > 1 else found)))
    width = max(len(r[0]) for r in rows)
    print(f"{'name':<{width}}  {'state':<8} {'size':<18} where")
    for name, state, size, where in rows:
        ds = catalog.DATA_SETS[name]
        print(f"{name:<{width}}  {state:<8} {size:<18} {where}")
        print(f"{'':<{width}}  {ds.title}; license: {ds.license}")
        print(f"{'':<{width}}  needed by: {', '.join(needed.get(name, []))}")
    print("offline: the embedded digits, the paper's traces and both device profiles need nothing; CIFAR-10 and "
          "Speech Commands need one fetch.")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from ..data import catalog
    from ..data.download import DownloadError

    url = args.url
    if args.from_file is not None:
        if url is not None:
            raise SystemExit("felix-jax data fetch: --from and --url name the same thing; give one")
        url = str(user_path(args.from_file))
    size = args.size
    try:
        path = catalog.fetch(args.name, url=url, sha256=args.sha256, size=size, progress=not args.quiet,
                             decode=not args.no_decode)
    except KeyboardInterrupt:
        raise SystemExit("felix-jax data fetch: interrupted; what was downloaded is kept and the same command "
                         "resumes it") from None
    except (DownloadError, ValueError, *USER_ERRORS) as e:
        raise SystemExit(f"felix-jax data fetch: {one_line(e)}")
    print(f"{args.name}: ready at {path}")
    return 0


def _build_traces(args: argparse.Namespace) -> int:
    from ..data.download import download
    from ..traces import reference_builder as rb
    from ..traces.data_paths import data_home

    out = user_path(args.out) if args.out else data_home()[0] / "traces" / rb.REFERENCE_FILE_NAME
    try:
        if args.from_dir is not None:
            source = user_path(args.from_dir)
        else:
            source = data_home()[0] / "flame" / "async_cifar10_trainer_configs"
            print(f"fetching the 300 trainer configurations of {rb.FLAME_REPOSITORY} at {rb.FLAME_COMMIT[:8]} into "
                  f"{source} (files already there are kept)")
            rb.fetch_trainer_configs(source, base_url=args.base_url,
                                     download=lambda url, path: download(url, path, progress=False))
        arrays = rb.build_reference_arrays(source)
        rb.write_reference_npz(arrays, out)
    except KeyboardInterrupt:
        raise SystemExit("felix-jax data build-traces: interrupted; nothing was written (the fetched files are kept)")
    except (ValueError, *USER_ERRORS) as e:
        raise SystemExit(f"felix-jax data build-traces: {one_line(e)}")
    differ = rb.differences(arrays)
    print(f"wrote {out}")
    if differ:
        print(f"it differs from the shipped {rb.SHIPPED_REFERENCE.name} in {len(differ)} array(s): "
              + "; ".join(differ[:5]))
        return 1
    print(f"equal, array for array, to the shipped {rb.SHIPPED_REFERENCE}")
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``data`` command and its subcommands."""
    from ..traces.reference_builder import FLAME_RAW_BASE

    data = sub.add_parser("data", help="list, fetch and build the real data (CIFAR-10, Speech Commands, the "
                                       "paper's traces)",
                          formatter_class=HelpFormatter, epilog=DATA_EXAMPLES,
                          description="The real data felix-jax reads: what is here, fetched from canonical public "
                                      "archives, and the paper's traces rebuilt from their public source.")
    verbs = data.add_subparsers(dest="data_command", metavar="{list,fetch,build-traces}")
    listing = verbs.add_parser("list", help="what is here and where, sizes, and which presets need what",
                               formatter_class=HelpFormatter)
    listing.set_defaults(func=_list)
    add_traceback_flag(listing)
    fetch = verbs.add_parser("fetch", help="download a data set's canonical archive, verify and decode it",
                             formatter_class=HelpFormatter, epilog=DATA_EXAMPLES)
    fetch.add_argument("name", choices=("cifar10", "speech_commands"), help="the data set")
    fetch.add_argument("--from", dest="from_file", metavar="FILE",
                       help="a local copy of the canonical archive (checked against the published checksum)")
    fetch.add_argument("--url", help="another location of the canonical archive (a mirror, or file://...)")
    fetch.add_argument("--sha256", help="an archive of your own: its SHA-256 instead of the published one "
                                        "(its size is then not checked unless --size)")
    fetch.add_argument("--size", type=int, help="the archive's size in bytes, with --sha256")
    fetch.add_argument("--no-decode", action="store_true", help="download and check only; decode at first use")
    fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    fetch.set_defaults(func=_fetch)
    add_traceback_flag(fetch)
    build = verbs.add_parser("build-traces", help="rebuild the paper's reference traces from the authors' trainer "
                                                  "configurations", formatter_class=HelpFormatter)
    build.add_argument("--from", dest="from_dir", metavar="DIR",
                       help="the folder of trainer_1.json ... trainer_300.json, or a checkout of dhruvsgarg/flame "
                            "(default: fetch them at the pinned commit into the data home)")
    build.add_argument("--out", help="the archive to write (default: <data home>/traces/"
                                     "felix_reference_300clients.npz, which then takes precedence over the shipped "
                                     "copy)")
    build.add_argument("--base-url", default=FLAME_RAW_BASE, help=argparse.SUPPRESS)
    build.set_defaults(func=_build_traces)
    add_traceback_flag(build)
    data.set_defaults(func=lambda args: (data.print_help(), 0)[1])
    return data


"""The real data felix-jax knows by name: where each comes from, where it lands, whether it is here.

=====================  ============================================  =========================================
name                   what                                          from
=====================  ============================================  =========================================
``reference_traces``   the paper's four traces, its 300 clients'     shipped (``felix_jax/traces/reference/``);
                       delays and sizes                              ``felix-jax data build-traces`` rebuilds it
``flash``              the FLASH study's phone speeds and bandwidth  shipped
``cifar10``            CIFAR-10, 60,000 images                       ``felix-jax data fetch cifar10``: the
                                                                     canonical ``cifar-10-binary.tar.gz``
``speech_commands``    Speech Commands v0.02, the official 4,890-    ``felix-jax data fetch speech_commands``:
                       clip test set                                 the canonical test-set archive, converted
=====================  ============================================  =========================================

:func:`fetch` downloads a data set's canonical archive into the data home (``$FELIX_JAX_DATA``, else
the user cache's ``data/``: :func:`~felix_jax.data.paths.resolve_data_dir`), verifies its published
size and SHA-256, resumes a cut download and decodes it once (the decoded arrays go to the cache).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

from ..traces.data_paths import SHIPPED_FILES, data_home, shipped_file
from . import cifar10, speech_commands
from .download import DownloadError, download, sha256_file, size_text, writable_folder


@dataclasses.dataclass(frozen=True)
class Archive:
    """A canonical public archive: its URL, published size and SHA-256, and where it lands in the data home."""

    url: str
    size: int
    sha256: str
    relpath: str
    checksum_source: str  # where the published checksum comes from


@dataclasses.dataclass(frozen=True)
class DataSet:
    name: str
    title: str
    files: tuple[str, ...]  # relative to a data folder; the first one present is used
    archive: Archive | None  # None: shipped with felix-jax
    license: str
    # the archive -> the file the loader reads (None: the archive is what the loader reads)
    prepare: Callable[[Path, Path], Path] | None = None
    prepared_relpath: str | None = None
    decode: Callable[[Path], object] | None = None  # a first load, which fills the decoded-array cache

    @property
    def shipped(self) -> bool:
        return self.archive is None


CIFAR10_ARCHIVE = Archive(
    url="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz", size=170_052_171,
    sha256="c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd", relpath=cifar10.BINARY_RELPATH,
    checksum_source="the data set's page (MD5 c32a1d4ab5d03f1284b67883e8d87530) and tensorflow-datasets' "
                    "checksum list (SHA-256)")
SPEECH_ARCHIVE = Archive(
    url="https://storage.googleapis.com/download.tensorflow.org/data/speech_commands_test_set_v0.02.tar.gz",
    size=112_563_277, sha256="cc2a00c1147c2254e9be3fa0f779d8c17421dc349b86366567a8edfa9acd51df",
    relpath=speech_commands.TEST_ARCHIVE_RELPATH, checksum_source="tensorflow-datasets' checksum list")

DATA_SETS: dict[str, DataSet] = {
    "reference_traces": DataSet(
        "reference_traces", "the paper's traces, client delays and sizes (300 clients)",
        ("traces/felix_reference_300clients.npz",), None, "Apache-2.0 (dhruvsgarg/flame)"),
    "flash": DataSet(
        "flash", "FLASH phone speeds and bandwidths", tuple(f for f in SHIPPED_FILES if "flash_" in f), None,
        "BSD-2-Clause (PKU-Chengxu/FLASH)"),
    "cifar10": DataSet(
        "cifar10", "CIFAR-10 (50,000 train + 10,000 test images)", cifar10.CIFAR10_FILES, CIFAR10_ARCHIVE,
        "no license stated; Krizhevsky, 2009", decode=lambda path: cifar10.load_cifar10_binary(path)),
    "speech_commands": DataSet(
        "speech_commands", "Speech Commands v0.02, official test set (4,890 clips)",
        (speech_commands.SHARED_RELPATH,), SPEECH_ARCHIVE, "CC BY 4.0 (Warden, 2018)",
        prepare=speech_commands.convert_test_archive, prepared_relpath=speech_commands.SHARED_RELPATH),
}
# the data set names a scenario's `dataset` field reads
DATASET_FIELD = {"cifar10": "cifar10", "cifar10_binary": "cifar10", "speech_commands": "speech_commands",
                 "speech_commands35": "speech_commands"}


def get(name: str) -> DataSet:
    try:
        return DATA_SETS[name]
    except KeyError:
        from ..suggest import known_names

        raise ValueError(f"unknown data set {name!r}" + known_names(name, sorted(DATA_SETS), "data sets")) from None


def locate(name: str, data_dir: str | os.PathLike | None = None) -> Path | None:
    """The file a loader would read for data set ``name`` (the data folder first, then a shipped copy), or
    None when it is not here."""
    ds = get(name)
    root = Path(data_dir).expanduser() if data_dir is not None else data_home()[0]
    for relative in ds.files:
        if (root / relative).is_file():
            return root / relative
    if data_dir is None:
        return next((p for p in map(shipped_file, ds.files) if p is not None), None)
    return None


def fetch_command(name: str) -> str:
    return f"felix-jax data fetch {name}"


def fetch(name: str, *, url: str | None = None, sha256: str | None = None, size: int | None = None,
          progress: bool = True, decode: bool = True, say: Callable[[str], None] = print) -> Path:
    """Downloads data set ``name``'s canonical archive into the data home (or reads ``url``: another mirror,
    a ``file://`` URL or a local copy of the archive; ``sha256`` / ``size`` override the published ones for
    an archive of one's own), verifies it, prepares the file the loader reads and decodes it once.
    Returns that file. An archive already in place is checked, not downloaded again.

    Raises:
      DownloadError: the archive cannot be read, is not the published one, or the data home is not writable.
      ValueError: an unknown name, or a data set that ships with felix-jax.
    """
    ds = get(name)
    if ds.shipped:
        where = locate(name)
        raise ValueError(f"{name} ships with felix-jax ({where}); nothing to fetch"
                         + ("; `felix-jax data build-traces` rebuilds it from its public source"
                            if name == "reference_traces" else ""))
    home, source = data_home()
    setting = ("set FELIX_JAX_DATA to a folder you can write to" if source != "FELIX_JAX_DATA" else
               f"FELIX_JAX_DATA={home} is not writable: point it at a folder you can write to, or unset it to "
               "use the user cache")
    archive = ds.archive
    dest = home / archive.relpath
    writable_folder(dest.parent, setting)
    expected_sha = sha256 or archive.sha256
    # an archive of one's own (sha256 given) has its own size; a mirror of the canonical one has the published
    expected_size = size if size is not None else (archive.size if sha256 is None else None)
    if dest.is_file():
        say(f"{dest} is here; checking it")
        if sha256_file(dest) != expected_sha.lower():
            raise DownloadError(f"{dest} is here but its SHA-256 is not {'the published ' if sha256 is None else ''}"
                                f"{expected_sha}: remove it and fetch again")
    else:
        origin = url or archive.url
        size_said = f" ({size_text(expected_size)})" if expected_size is not None else ""
        say(f"fetching {name}{size_said} from {origin} into {dest.parent}")
        download(origin, dest, sha256=expected_sha, size=expected_size, progress=progress, what=name)
    target = dest
    if ds.prepare is not None:
        target = home / ds.prepared_relpath
        if not target.is_file() or target.stat().st_mtime < dest.stat().st_mtime:
            say(f"converting {dest.name} into {target.name}")
            ds.prepare(dest, target)
    if decode and ds.decode is not None:
        say(f"decoding {target.name} once (the arrays go to the cache)")
        ds.decode(target)
    return target

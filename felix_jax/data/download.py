"""Downloading one file the way a data set fetch should (host-only): resumable, verified, atomic.

:func:`download` writes ``<dest>.part`` while it reads and renames it to ``dest`` only once its size
and SHA-256 match, so a loader never reads a half-written or corrupt file. A cut download (a dropped
connection, Ctrl-C, a kill) leaves the ``.part`` file, and the next call resumes it from where it stopped
(an HTTP ``Range`` request; a server that ignores it sends the whole file again, which is detected). A
file whose checksum does not match is removed and the error says what was expected and what came.
``file://`` URLs and plain paths are read the same way (resume included), which is how the tests serve
archives without a network. A progress bar (tqdm, on stderr) shows bytes, rate and time left.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import BinaryIO

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60.0


class DownloadError(OSError):
    """A download that could not finish or whose content was wrong: one line saying what to do."""

    def __init__(self, message: str):
        super().__init__(message)
        self.cli_message = message

    def __str__(self) -> str:
        return self.cli_message


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK_BYTES), b""):
            h.update(block)
    return h.hexdigest()


def size_text(n: float | None) -> str:
    """``170.1 MB`` (decimal units, as download sizes are quoted); ``?`` for an unknown size."""
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def writable_folder(folder: Path, setting: str) -> Path:
    """Creates ``folder`` if needed and checks that files can be written in it; a :class:`DownloadError`
    naming the folder and ``setting`` (what to change) otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".felix_jax_write_probe_{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise DownloadError(f"cannot write to {folder} ({e.strerror or e}): {setting}") from None
    return folder


def _open_source(url: str, offset: int) -> tuple[BinaryIO, int | None, bool]:
    """``(stream, bytes the stream will give or None, whether it starts at offset)``."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        path = Path(urllib.request.url2pathname(parsed.path) if parsed.scheme == "file" else url)
        f = open(path, "rb")
        size = os.fstat(f.fileno()).st_size
        f.seek(min(offset, size))
        return f, size - min(offset, size), True
    request = urllib.request.Request(url, headers={"User-Agent": "felix-jax"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:  # nothing left past offset: the .part file already holds it all
            return _Empty(), 0, True
        raise
    length = response.headers.get("Content-Length")
    resumed = response.status == 206
    return response, int(length) if length and length.isdigit() else None, resumed or not offset


class _Empty:
    def read(self, n: int = -1) -> bytes:
        return b""

    def close(self) -> None:
        pass


def download(url: str, dest: str | os.PathLike, *, sha256: str | None = None, size: int | None = None,
             progress: bool = True, what: str | None = None) -> Path:
    """Downloads ``url`` to ``dest`` (module docstring) and returns ``dest``.

    Args:
      url: ``http(s)://``, ``file://`` or a local path.
      dest: the final file; ``<dest>.part`` holds a download in progress.
      sha256: the expected SHA-256 (hex); None: not checked.
      size: the expected size in bytes (None: not checked); a larger ``.part`` file is started again.
      progress: show a progress bar on stderr.
      what: the name shown beside the bar (default: the file name).

    Raises:
      DownloadError: the source cannot be read (the ``.part`` file kept for a resume), or the content
        does not match ``size`` / ``sha256`` (the file removed).
    """
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.is_file() else 0
    if size is not None and offset > size:  # not a prefix of the file we want
        part.unlink()
        offset = 0
    try:
        source, remaining, from_offset = _open_source(url, offset)
    except FileNotFoundError:
        raise DownloadError(f"cannot fetch {url}: no such file") from None
    except (OSError, urllib.error.URLError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        kept = f"; {size_text(offset)} downloaded so far are kept in {part} and the same command resumes" \
            if offset else ""
        raise DownloadError(f"cannot fetch {url}: {reason} (offline? a proxy?){kept}") from None
    if not from_offset:  # the server ignored the Range request: start again
        offset = 0
    total = size if size is not None else (offset + remaining if remaining is not None else None)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1000,
                   desc=what or dest.name, leave=True, dynamic_ncols=True)
    received = 0
    try:
        with open(part, "ab" if offset else "wb") as out:
            while True:
                try:
                    block = source.read(CHUNK_BYTES)
                except (OSError, urllib.error.URLError, ValueError) as e:  # a dropped connection
                    out.flush()
                    raise DownloadError(f"the download of {url} was cut ({e}); {size_text(out.tell())} are kept "
                                        f"in {part} and the same command resumes from there") from None
                if not block:
                    break
                out.write(block)
                received += len(block)
                if bar is not None:
                    bar.update(len(block))
    finally:
        source.close()
        if bar is not None:
            bar.close()
    got = part.stat().st_size
    if remaining is not None and received < remaining:  # the source said more was coming: a cut transfer
        raise DownloadError(f"the download of {url} stopped at {got:,} bytes of {offset + remaining:,}; the part is "
                            f"kept in {part} and the same command resumes from there")
    if size is not None and got != size:  # the whole source was read: it is another file
        part.unlink()
        raise DownloadError(f"{url} holds {got:,} bytes where the published file has {size:,}: not that file "
                            "(nothing kept; check the file or URL, or give --sha256 and --size for an archive of "
                            "your own)")
    if sha256 is not None:
        digest = sha256_file(part)
        if digest != sha256.lower():
            part.unlink()
            raise DownloadError(f"{url}: checksum mismatch, SHA-256 {digest} where {sha256.lower()} is published "
                                "(a corrupt or different file; removed, fetch again)")
    os.replace(part, dest)
    return dest

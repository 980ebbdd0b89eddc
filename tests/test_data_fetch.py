"""The paper's data anywhere: the shipped traces and their builder, the data home, and fetching a data set
from its canonical archive (served here from local files and a loopback server: no network)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import wave
from pathlib import Path

import numpy as np
import pytest

from felix_jax.data import catalog
from felix_jax.data.download import DownloadError, download
from felix_jax.traces import load_reference_trace, reference_builder as rb
from felix_jax.traces.data_paths import SHIPPED_DIR, SHIPPED_FILES, data_home, resolve_data_file

from .conftest import DATA_DIR, require_data

TRAINER_CONFIGS = "flame/async_cifar10_trainer_configs"
REPO = Path(__file__).resolve().parents[1]


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh user with no data folder: FELIX_JAX_DATA unset, the cache (and so the data home) in tmp."""
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "data"


# ---------------------------------------------------------------- the shipped files and their builder
def test_the_builder_rebuilds_the_shipped_traces_array_for_array(tmp_path):
    root = require_data(f"{TRAINER_CONFIGS}/trainer_1.json")
    arrays = rb.build_reference_arrays(root / TRAINER_CONFIGS)
    assert rb.differences(arrays) == []
    out = rb.write_reference_npz(arrays, tmp_path / "ref.npz")
    with np.load(out) as built, np.load(rb.SHIPPED_REFERENCE) as shipped:
        assert built.files == shipped.files
        for k in shipped.files:
            assert built[k].dtype == shipped[k].dtype and np.array_equal(built[k], shipped[k]), k
    # a flame checkout: the folder found at its path inside the repository
    checkout = tmp_path / "flame"
    (checkout / rb.FLAME_TRAINER_DIR).parent.mkdir(parents=True)
    (checkout / rb.FLAME_TRAINER_DIR).symlink_to(root / TRAINER_CONFIGS)
    assert rb.differences(rb.build_reference_arrays(checkout)) == []


def test_the_builder_notices_a_changed_or_missing_trainer_file(tmp_path):
    root = require_data(f"{TRAINER_CONFIGS}/trainer_1.json")
    folder = tmp_path / "configs"
    folder.mkdir()
    for p in (root / TRAINER_CONFIGS).glob("trainer_*.json"):
        (folder / p.name).write_bytes(p.read_bytes())
    config = json.loads((folder / "trainer_7.json").read_text())
    config["hyperparameters"]["training_delay_s"] = "999.0"
    (folder / "trainer_7.json").write_text(json.dumps(config))
    assert rb.differences(rb.build_reference_arrays(folder)) == ["training_delay_s: float32(300,) against "
                                                                 "float32(300,) (values differ)"]
    (folder / "trainer_300.json").unlink()
    with pytest.raises(ValueError, match="trainer_300.json"):
        rb.build_reference_arrays(folder)


def test_the_shipped_files_are_the_public_ones():
    assert (SHIPPED_DIR / "NOTICE").is_file() and (SHIPPED_DIR / "LICENSE-flame-Apache-2.0.txt").is_file()
    notice = (SHIPPED_DIR / "NOTICE").read_text()
    assert rb.FLAME_COMMIT in notice and rb.FLASH_COMMIT in notice and "Apache" in notice and "BSD" in notice
    for name, (_, sha) in rb.FLASH_FILES.items():
        assert _sha(SHIPPED_DIR / name) == sha, name
    if DATA_DIR is not None and (DATA_DIR / "traces/felix_reference_300clients.npz").is_file():
        for relative in SHIPPED_FILES:  # the offline copies are the same files
            assert _sha(SHIPPED_DIR / Path(relative).name) == _sha(DATA_DIR / relative), relative


def test_reference_traces_and_device_profiles_need_no_data_folder(home):
    assert resolve_data_file("traces/felix_reference_300clients.npz") == SHIPPED_DIR / "felix_reference_300clients.npz"
    trace = load_reference_trace("mobiperf_3st_50")
    assert trace.num_clients == 300
    from felix_jax.traces import flash_profile, reference_profile

    assert reference_profile().train_delay_s.shape == (300,)
    assert flash_profile(10, seed=0).compute_speed.shape == (10,)
    # a copy in the data home comes first (a user's own rebuild), the shipped one is the fallback
    own = home / "traces" / "felix_reference_300clients.npz"
    own.parent.mkdir(parents=True)
    own.write_bytes(rb.SHIPPED_REFERENCE.read_bytes())
    assert resolve_data_file("traces/felix_reference_300clients.npz") == own
    # an explicit path is the only place looked
    with pytest.raises(FileNotFoundError, match="cannot find"):
        resolve_data_file("traces/felix_reference_300clients.npz", home / "nowhere")


def test_the_data_home_is_the_variable_else_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "c"))
    assert data_home() == (tmp_path / "c" / "data", "the user cache")
    monkeypatch.delenv("FELIX_JAX_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert data_home()[0] == tmp_path / "xdg" / "felix_jax" / "data"
    monkeypatch.setenv("FELIX_JAX_DATA", str(tmp_path / "d"))
    assert data_home() == (tmp_path / "d", "FELIX_JAX_DATA")


# ---------------------------------------------------------------- the downloader
class _Server(http.server.BaseHTTPRequestHandler):
    """Serves ``payload``, honouring Range unless ``ignore_range``; ``cut_after`` bytes then closes."""

    payload = b""
    cut_after: int | None = None
    ignore_range = False
    ranges: list = []

    def do_GET(self):  # noqa: N802 (the handler's name)
        start = 0
        header = self.headers.get("Range")
        type(self).ranges.append(header)
        if header and not self.ignore_range:
            start = int(header.split("=")[1].split("-")[0])
            if start >= len(self.payload):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206)
        else:
            self.send_response(200)
        body = self.payload[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.cut_after is not None:
            self.wfile.write(body[:self.cut_after])
            self.wfile.flush()
            self.connection.shutdown(2)  # a dropped connection
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    handler = type("Handler", (_Server,), {"ranges": [], "cut_after": None, "ignore_range": False})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}/archive.tar.gz"
    httpd.shutdown()
    httpd.server_close()


def test_a_cut_download_is_kept_and_resumed_with_a_range_request(server, tmp_path):
    handler, url = server
    handler.payload = os.urandom(300_000)
    sha = hashlib.sha256(handler.payload).hexdigest()
    dest = tmp_path / "a.tar.gz"
    handler.cut_after = 120_000
    with pytest.raises(DownloadError, match="resumes"):
        download(url, dest, sha256=sha, size=len(handler.payload), progress=False)
    part = dest.with_name(dest.name + ".part")
    assert not dest.exists() and part.stat().st_size == 120_000  # never a half file where a loader reads
    handler.cut_after = None
    download(url, dest, sha256=sha, size=len(handler.payload), progress=False)
    assert dest.read_bytes() == handler.payload and not part.exists()
    assert handler.ranges == [None, "bytes=120000-"]


def test_a_server_that_ignores_the_range_starts_the_file_again(server, tmp_path):
    handler, url = server
    handler.payload = os.urandom(50_000)
    dest = tmp_path / "a.bin"
    dest.with_name("a.bin.part").write_bytes(handler.payload[:10_000])
    handler.ignore_range = True
    download(url, dest, sha256=hashlib.sha256(handler.payload).hexdigest(), progress=False)
    assert dest.read_bytes() == handler.payload


def test_a_corrupt_download_is_removed_and_said(server, tmp_path):
    handler, url = server
    handler.payload = os.urandom(10_000)
    dest = tmp_path / "a.bin"
    with pytest.raises(DownloadError, match="checksum mismatch"):
        download(url, dest, sha256="0" * 64, progress=False)
    assert not dest.exists() and not dest.with_name("a.bin.part").exists()
    with pytest.raises(DownloadError, match="not that file"):  # the whole source read, another size
        download(url, dest, size=12_345, progress=False)
    assert not dest.exists() and not dest.with_name("a.bin.part").exists()


def test_no_network_is_one_line_naming_the_url(tmp_path):
    with pytest.raises(DownloadError, match="cannot fetch http://127.0.0.1:9/x"):
        download("http://127.0.0.1:9/x", tmp_path / "x", progress=False)


# ---------------------------------------------------------------- fetching a data set
def cifar_binary_archive(path: Path, train_per_batch=120, test=100, seed=0) -> str:
    """A small archive in the canonical CIFAR-10 binary layout; returns its SHA-256."""
    rng = np.random.default_rng(seed)
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, n in [(f"data_batch_{i}.bin", train_per_batch) for i in range(1, 6)] + [("test_batch.bin", test)]:
            records = np.concatenate([rng.integers(0, 10, (n, 1), dtype=np.uint8),
                                      rng.integers(0, 256, (n, 3072), dtype=np.uint8)], 1).tobytes()
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(records)
            tar.addfile(info, io.BytesIO(records))
    return _sha(path)


def test_fetch_cifar10_from_a_local_archive_decodes_it_once(home, tmp_path):
    archive = tmp_path / "cifar-10-binary.tar.gz"
    sha = cifar_binary_archive(archive)
    # the published checksum refuses a file that is not the canonical archive: nothing left behind
    with pytest.raises(DownloadError, match="not that file"):
        catalog.fetch("cifar10", url=str(archive), progress=False, say=lambda s: None)
    assert not (home / "cifar10").exists() or not any((home / "cifar10").iterdir())
    path = catalog.fetch("cifar10", url=str(archive), sha256=sha, progress=False, say=lambda s: None)
    assert path == home / "cifar10" / "cifar-10-binary.tar.gz" and catalog.locate("cifar10") == path
    cached = list((home.parent).glob("cifar10_binary-*.npz"))
    assert len(cached) == 1  # decoded once, into the cache
    from felix_jax.data.loaders import load_dataset

    ds = load_dataset("cifar10")
    assert ds.train_x.shape == (600, 32, 32, 3) and ds.test_x.shape == (100, 32, 32, 3)
    assert "exact pixels" in ds.description
    said = []
    catalog.fetch("cifar10", url=str(archive), sha256=sha, progress=False, say=said.append)  # here: checked only
    assert said[0].endswith("is here; checking it")


def test_fetch_refuses_an_unwritable_data_home_in_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FELIX_JAX_DATA", str(blocker / "data"))  # a file where a folder must go
    with pytest.raises(DownloadError, match="cannot write to .*FELIX_JAX_DATA"):
        catalog.fetch("cifar10", url=str(blocker), sha256="0" * 64, progress=False, say=lambda s: None)
    if os.geteuid() != 0:  # permissions bind only a user who is not root
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        monkeypatch.setenv("FELIX_JAX_DATA", str(ro))
        with pytest.raises(DownloadError, match="cannot write to"):
            catalog.fetch("cifar10", url=str(blocker), sha256="0" * 64, progress=False, say=lambda s: None)


def _speech_archive(path: Path, clips: list[tuple[str, str, np.ndarray]]) -> str:
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for folder, name, audio in clips:
            buf = io.BytesIO()
            with wave.open(buf, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(16000)
                w.writeframes(audio.astype("<i2").tobytes())
            info = tarfile.TarInfo(f"./{folder}/{name}")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)
    return _sha(path)


def test_fetch_speech_commands_converts_the_test_archive_as_the_offline_copy_holds_it(home, tmp_path):
    rng = np.random.default_rng(1)
    clip = lambda n=16000: rng.integers(-3000, 3000, n).astype(np.int16)  # noqa: E731
    clips = [("yes", "ffb86d3c_nohash_0.wav", clip()), ("_silence_", "1024.wav", clip()),
             ("_unknown_", "backward_0c540988_nohash_0.wav.wav", clip(9000)), ("down", "022cd682_nohash_0.wav", clip())]
    archive = tmp_path / "speech_commands_test_set_v0.02.tar.gz"
    sha = _speech_archive(archive, clips)
    path = catalog.fetch("speech_commands", url=str(archive), sha256=sha, progress=False, say=lambda s: None)
    assert path == home / "speech_commands" / "speech_commands_v0.02_test.npz"
    with np.load(path) as z:
        assert list(z["filenames"]) == ["1024.wav", "backward_0c540988_nohash_0.wav.wav", "022cd682_nohash_0.wav",
                                        "ffb86d3c_nohash_0.wav"]  # by class, then name
        assert list(z["classes12"][z["label12"]]) == ["_silence_", "_unknown_", "down", "yes"]
        assert list(z["words"][z["word"]]) == ["_silence_", "backward", "down", "yes"]
        assert z["audio"].shape == (4, 16000) and np.array_equal(z["audio"][1, :9000], clips[2][2])
        assert not z["audio"][1, 9000:].any()  # zero-padded to one second
        if DATA_DIR is not None and (DATA_DIR / "speech_commands/speech_commands_v0.02_test.npz").is_file():
            with np.load(DATA_DIR / "speech_commands/speech_commands_v0.02_test.npz") as shared:
                assert list(z["classes12"]) == list(shared["classes12"]) and list(z["words"]) == list(shared["words"])


# ---------------------------------------------------------------- the command line, as a new user
def _cli(args, cwd, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "felix_jax.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def fresh_user_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("FELIX_JAX_DATA",)}
    env["FELIX_JAX_CACHE"] = str(tmp_path / "cache")
    return env


def test_a_fresh_user_runs_the_paper_traces_and_is_told_how_to_get_cifar10(tmp_path):
    env = fresh_user_env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    done = _cli(["run", "--preset", "tiny", "--set", "availability=ref:mobiperf_3st_50", "--set", "max_aggregations=2",
                 "--out", "run"], work, env)
    assert done.returncode == 0, done.stderr
    stopped = _cli(["run", "--preset", "cifar10-longhorizon"], work, env)
    assert stopped.returncode != 0
    lines = [line for line in (stopped.stdout + stopped.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "felix-jax data fetch cifar10" in lines[0] and "cifar-10-binary.tar.gz" in lines[0]
    assert sorted(p.name for p in work.iterdir()) == ["run"]  # no results folder for the refused run
    listing = _cli(["data", "list"], work, env)
    assert listing.returncode == 0 and "reference_traces  shipped" in listing.stdout
    assert "cifar10           missing" in listing.stdout and "cifar10-longhorizon" in listing.stdout


def test_build_traces_on_the_command_line(tmp_path):
    root = require_data(f"{TRAINER_CONFIGS}/trainer_1.json")
    env = fresh_user_env(tmp_path)
    done = _cli(["data", "build-traces", "--from", str(root / TRAINER_CONFIGS), "--out", "ref.npz"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert "equal, array for array" in done.stdout and (tmp_path / "ref.npz").is_file()
    # without --from it fetches the 300 files (here from a local folder standing in for the pinned commit)
    done = _cli(["data", "build-traces", "--base-url", (root / TRAINER_CONFIGS).as_uri()], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cache/data/traces/felix_reference_300clients.npz").is_file()
    assert len(list((tmp_path / "cache/data/flame/async_cifar10_trainer_configs").glob("trainer_*.json"))) == 300


def test_the_wheel_holds_the_traces_and_their_notice(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    import zipfile

    wheel = next(tmp_path.glob("felix_jax-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("felix_reference_300clients.npz", "NOTICE", "LICENSE-flame-Apache-2.0.txt",
                 *rb.FLASH_FILES):
        assert f"felix_jax/traces/reference/{name}" in names, name
    # every module of the source tree, under the name the package maps it to (a wheel without felix_jax.cli
    # installs a felix-jax command that cannot start)
    expected = {f"felix_jax/{p.relative_to(REPO / 'felix_jax').as_posix()}" for p in (REPO / "felix_jax").rglob("*.py")}
    expected |= {f"felix_jax/{top}/{p.relative_to(REPO / top).as_posix()}" for top in ("models", "traces")
                 for p in (REPO / top).rglob("*.py")}
    assert not sorted(expected - names)


@pytest.mark.slow
def test_after_a_fetch_from_a_local_copy_the_paper_preset_runs_as_shipped(tmp_path):
    """The acceptance path of a new user with no data folder: the preset stops naming the fetch, the fetch
    takes a local copy of the archive, and the same preset then runs (an archive in the canonical layout
    holding enough images for the preset's 12,000-image subset)."""
    env = fresh_user_env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    archive = tmp_path / "cifar-10-binary.tar.gz"
    sha = cifar_binary_archive(archive, train_per_batch=2_500, test=300)
    preset = ["run", "--preset", "cifar10-longhorizon", "--set", "max_aggregations=2", "--out", "run"]
    stopped = _cli(preset, work, env)
    assert stopped.returncode != 0 and "felix-jax data fetch cifar10" in stopped.stderr
    fetched = _cli(["data", "fetch", "cifar10", "--from", str(archive), "--sha256", sha, "--quiet"], work, env)
    assert fetched.returncode == 0, fetched.stderr
    assert "cifar10: ready at" in fetched.stdout
    done = _cli(preset, work, env)
    assert done.returncode == 0, done.stderr
    config = json.loads((work / "run" / "config.json").read_text())
    read = {Path(p).name: rec["role"] for p, rec in config["inputs"].items()}
    assert read == {"cifar-10-binary.tar.gz": "dataset", "felix_reference_300clients.npz": "dataset"}

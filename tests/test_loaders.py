"""Tests for the data loaders, on small data the tests make themselves."""

import io
import os
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from felix_jax.data import cifar10, embedded, loaders, paths, speech_commands
from felix_jax.data.dataset import ArrayDataset
from tests.conftest import CIFAR10_FILE, DATA_DIR, needs_data

# The real offline data for the slow test is DATA_DIR ($FELIX_JAX_DATA as set when the tests
# start: the fixture below clears it per test).


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Every test gets its own cache folder and no inherited data folder."""
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)


def block_images(n, seed=0):
    """Smooth 32x32 RGB images (4 flat 16x16 quadrants) that JPEG keeps nearly exact."""
    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, size=(n, 2, 2, 3), dtype=np.uint8)
    return np.repeat(np.repeat(colours, 16, axis=1), 16, axis=2)


def write_jpeg_npz(path: Path, images, labels, split, blobs=None):
    if blobs is None:
        blobs = []
        for img in images:
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=95)
            blobs.append(np.frombuffer(buf.getvalue(), np.uint8))
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, data=np.concatenate(blobs), offsets=offsets, split=np.asarray(split, np.uint8),
             label=np.asarray(labels, np.uint8), classes=np.array(cifar10.CIFAR10_CLASSES),
             name=np.array([f"img{i}.jpg" for i in range(len(blobs))]))


@pytest.fixture
def cifar_dir(tmp_path, monkeypatch):
    root = tmp_path / "data"
    images = block_images(12)
    labels = np.arange(12) % 10
    split = np.array([0] * 8 + [1] * 4)
    write_jpeg_npz(root / cifar10.SHARED_RELPATH, images, labels, split)
    monkeypatch.setenv("FELIX_JAX_DATA", str(root))
    return root, images, labels, split


# ---------------------------------------------------------------- paths

def test_resolve_data_dir(tmp_path, monkeypatch):
    # without FELIX_JAX_DATA: the data home in the user cache (not created until a fetch writes to it)
    assert paths.resolve_data_dir() == tmp_path / "cache" / "data"
    with pytest.raises(FileNotFoundError, match="felix-jax data fetch cifar10"):
        cifar10.load_cifar10()
    monkeypatch.setenv("FELIX_JAX_DATA", str(tmp_path))
    assert paths.resolve_data_dir() == tmp_path
    assert paths.resolve_data_dir(tmp_path / "..") == tmp_path / ".."
    with pytest.raises(FileNotFoundError, match="does not exist"):
        paths.resolve_data_dir(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="cifar10_jpeg_bytes.npz"):
        cifar10.load_cifar10_shared()


def test_resolve_cache_dir(tmp_path, monkeypatch):
    assert paths.resolve_cache_dir() == tmp_path / "cache"
    assert (tmp_path / "cache").is_dir()
    monkeypatch.delenv("FELIX_JAX_CACHE")
    assert paths.resolve_cache_dir(tmp_path / "c2") == tmp_path / "c2"


# ---------------------------------------------------------------- CIFAR-10 shared JPEG copy

def test_cifar_shared_decodes(cifar_dir):
    _, images, labels, split = cifar_dir
    ds = cifar10.load_cifar10_shared()
    assert isinstance(ds, ArrayDataset)
    assert ds.train_x.shape == (8, 32, 32, 3) and ds.test_x.shape == (4, 32, 32, 3)
    assert ds.train_x.dtype == np.uint8 and ds.train_y.dtype == np.int32
    np.testing.assert_array_equal(ds.train_y, labels[split == 0])
    np.testing.assert_array_equal(ds.test_y, labels[split == 1])
    err = np.abs(ds.train_x.astype(int) - images[split == 0].astype(int))
    assert err.mean() < 3  # JPEG q95 of flat blocks is nearly exact
    assert ds.input_scale == pytest.approx(1 / 255)
    assert ds.input_mean == cifar10.CIFAR10_MEAN and ds.input_std == cifar10.CIFAR10_STD
    assert ds.class_names == cifar10.CIFAR10_CLASSES
    assert "JPEG" in ds.description and "quality 75" in ds.description
    assert "quality 75" in cifar10.load_cifar10_shared.__doc__


def test_cifar_shared_cache_is_used_and_keyed_by_source(cifar_dir, monkeypatch, tmp_path):
    root = cifar_dir[0]
    first = cifar10.load_cifar10_shared()
    entries = list((tmp_path / "cache").glob("cifar10_jpeg-*.npz"))
    assert len(entries) == 1

    def boom(*a, **k):
        raise AssertionError("decoded again despite a cache entry")

    monkeypatch.setattr(cifar10, "decode_jpeg_array", boom)
    second = cifar10.load_cifar10_shared()
    np.testing.assert_array_equal(first.train_x, second.train_x)
    np.testing.assert_array_equal(first.test_y, second.test_y)
    # A changed source file misses the cache.
    src = root / cifar10.SHARED_RELPATH
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(AssertionError, match="decoded again"):
        cifar10.load_cifar10_shared()
    # cache=False neither reads nor writes.
    monkeypatch.undo()
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache_off"))
    monkeypatch.setenv("FELIX_JAX_DATA", str(root))
    cifar10.load_cifar10_shared(cache=False)
    assert not list((tmp_path / "cache_off").glob("*.npz"))


def test_cifar_shared_rebuilds_corrupt_cache_entry(cifar_dir, tmp_path):
    cifar10.load_cifar10_shared()
    (entry,) = (tmp_path / "cache").glob("cifar10_jpeg-*.npz")
    entry.write_bytes(b"garbage")
    ds = cifar10.load_cifar10_shared()
    assert ds.train_x.shape == (8, 32, 32, 3)


def test_cifar_shared_parallel_decode_matches_serial(cifar_dir, monkeypatch):
    path = cifar_dir[0] / cifar10.SHARED_RELPATH
    with np.load(path) as z:
        data, offsets = z["data"], z["offsets"]
    serial = cifar10.decode_jpeg_array(data, offsets, num_workers=1)
    monkeypatch.setattr(cifar10, "_PARALLEL_MIN_IMAGES", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a worker failure (silent fallback) fails the test
        parallel = cifar10.decode_jpeg_array(data, offsets, num_workers=3, source=path)
    np.testing.assert_array_equal(serial, parallel)


def test_cifar_shared_parallel_falls_back_on_worker_failure(cifar_dir, monkeypatch):
    path = cifar_dir[0] / cifar10.SHARED_RELPATH
    with np.load(path) as z:
        data, offsets = z["data"], z["offsets"]
    monkeypatch.setattr(cifar10, "_PARALLEL_MIN_IMAGES", 0)
    monkeypatch.setattr(cifar10, "_WORKER_SRC", "raise SystemExit('boom')")
    with pytest.warns(RuntimeWarning, match="in-process"):
        images = cifar10.decode_jpeg_array(data, offsets, num_workers=2, source=path)
    assert images.shape == (12, 32, 32, 3)


def test_cifar_shared_malformed(tmp_path, monkeypatch):
    root = tmp_path / "data"
    target = root / cifar10.SHARED_RELPATH
    target.parent.mkdir(parents=True)
    monkeypatch.setenv("FELIX_JAX_DATA", str(root))
    target.write_bytes(b"this is not an npz")
    with pytest.raises(ValueError, match="cannot read"):
        cifar10.load_cifar10_shared()
    np.savez(target, data=np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="missing keys"):
        cifar10.load_cifar10_shared()
    bad = [np.frombuffer(b"\xff\xd8 not really a jpeg", np.uint8)]
    write_jpeg_npz(target, None, [0], [0], blobs=bad)
    with pytest.raises(ValueError, match="not a decodable image"):
        cifar10.load_cifar10_shared()


# ---------------------------------------------------------------- CIFAR-10 binary archive

def make_records(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    chw = rng.integers(0, 256, (n, 3, 32, 32)).astype(np.uint8)
    raw = np.concatenate([labels[:, None], chw.reshape(n, -1)], axis=1).tobytes()
    return raw, labels, chw.transpose(0, 2, 3, 1)


def write_binary_tar(path, batches, extra=None):
    with tarfile.open(path, "w:gz") as tar:
        for name, raw in {**batches, **(extra or {})}.items():
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


@pytest.fixture
def cifar_binary(tmp_path):
    batches, train_x, train_y = {}, [], []
    for i in range(1, 6):
        raw, y, x = make_records(2, seed=i)
        batches[f"data_batch_{i}.bin"] = raw
        train_x.append(x)
        train_y.append(y)
    raw, test_y, test_x = make_records(3, seed=9)
    batches["test_batch.bin"] = raw
    path = tmp_path / "cifar-10-binary.tar.gz"
    meta = "\n".join(cifar10.CIFAR10_CLASSES).encode() + b"\n\n"
    write_binary_tar(path, batches, {"batches.meta.txt": meta})
    return path, batches, np.concatenate(train_x), np.concatenate(train_y), test_x, test_y


def test_cifar_binary_parses_exactly(cifar_binary):
    path, _, train_x, train_y, test_x, test_y = cifar_binary
    ds = cifar10.load_cifar10_binary(path)
    assert ds.train_x.shape == (10, 32, 32, 3) and ds.test_x.shape == (3, 32, 32, 3)
    np.testing.assert_array_equal(ds.train_x, train_x)  # CHW planes -> HWC
    np.testing.assert_array_equal(ds.train_y, train_y)
    np.testing.assert_array_equal(ds.test_x, test_x)
    np.testing.assert_array_equal(ds.test_y, test_y)
    assert ds.class_names == cifar10.CIFAR10_CLASSES
    assert ds.input_mean == cifar10.CIFAR10_MEAN


def test_cifar_binary_from_extracted_folder(cifar_binary, tmp_path):
    path, _, train_x, *_ = cifar_binary
    out = tmp_path / "extracted"
    with tarfile.open(path) as tar:
        tar.extractall(out, filter="data")
    ds = cifar10.load_cifar10_binary(out)
    np.testing.assert_array_equal(ds.train_x, train_x)


def test_cifar_binary_from_data_dir(cifar_binary, tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "cifar10").mkdir(parents=True)
    (root / cifar10.BINARY_RELPATH).write_bytes(cifar_binary[0].read_bytes())
    monkeypatch.setenv("FELIX_JAX_DATA", str(root))
    assert cifar10.load_cifar10_binary().train_x.shape == (10, 32, 32, 3)


def test_cifar_binary_errors(cifar_binary, tmp_path):
    _, batches, *_ = cifar_binary
    with pytest.raises(FileNotFoundError):
        cifar10.load_cifar10_binary(tmp_path / "missing.tar.gz")
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar archive at all")
    with pytest.raises(ValueError, match="tar"):
        cifar10.load_cifar10_binary(junk)
    partial = tmp_path / "partial.tar.gz"
    write_binary_tar(partial, {k: v for k, v in batches.items() if k != "data_batch_3.bin"})
    with pytest.raises(ValueError, match="data_batch_3.bin"):
        cifar10.load_cifar10_binary(partial)
    truncated = tmp_path / "truncated.tar.gz"
    write_binary_tar(truncated, {**batches, "test_batch.bin": batches["test_batch.bin"][:-5]})
    with pytest.raises(ValueError, match="records"):
        cifar10.load_cifar10_binary(truncated)


def test_cifar_tfds_needs_tensorflow():
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="TensorFlow"):
            cifar10.load_cifar10_tfds()
        with pytest.raises(ImportError, match="TensorFlow"):
            speech_commands.load_speech_commands_tfds()
    else:
        pytest.skip("TensorFlow is installed; the tfds path would need network")


# ---------------------------------------------------------------- Speech Commands

WORDS = ["_silence_", "bed", "down", "go", "yes"]  # words[0] must be _silence_
CLASSES12 = ["_silence_", "_unknown_", "down", "go", "yes"]  # a reduced stand-in


def write_speech_npz(root: Path, n_speakers=10, clips_per_speaker=3, n_silence=5):
    rng = np.random.default_rng(0)
    names, word, label12 = [], [], []
    for s in range(n_speakers):
        spk = f"{s:04x}beef"
        for c in range(clips_per_speaker):
            w = 1 + (s + c) % 4
            names.append(f"bed_{spk}_nohash_{c}.wav.wav" if w == 1 else f"{spk}_nohash_{c}.wav")
            word.append(w)
            label12.append(1 if w == 1 else CLASSES12.index(WORDS[w]))
    for i in range(n_silence):
        names.append(f"{i}.wav")
        word.append(0)
        label12.append(0)
    n = len(names)
    t = np.arange(16000) / 16000
    audio = np.stack([np.sin(2 * np.pi * (200 + 50 * i) * t) * 8000 for i in range(n)])
    audio = (audio + rng.normal(0, 50, audio.shape)).astype(np.int16)
    path = root / speech_commands.SHARED_RELPATH
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, audio=audio, label12=np.array(label12, np.uint8), classes12=np.array(CLASSES12),
             word=np.array(word, np.uint8), words=np.array(WORDS), filenames=np.array(names))
    return path, np.array(names), np.array(word), np.array(label12)


@pytest.fixture
def speech_dir(tmp_path, monkeypatch):
    root = tmp_path / "data"
    info = write_speech_npz(root)
    monkeypatch.setenv("FELIX_JAX_DATA", str(root))
    return (root, *info)


def test_speaker_of():
    assert speech_commands.speaker_of("fdb5155e_nohash_0.wav") == "fdb5155e"
    assert speech_commands.speaker_of("backward_0c540988_nohash_0.wav.wav") == "0c540988"
    assert speech_commands.speaker_of("some/dir/abc123_nohash_2.wav") == "abc123"
    assert speech_commands.speaker_of("1024.wav") is None


def test_speech_shared_logmel_split_by_speaker(speech_dir):
    _, _, names, _, _ = speech_dir
    ds = speech_commands.load_speech_commands_shared()
    n = len(names)
    assert ds.train_x.shape[1:] == (98, 40, 1) and ds.train_x.dtype == np.float32
    assert ds.train_x.shape[0] + ds.test_x.shape[0] == n
    assert ds.num_classes == len(CLASSES12) and ds.class_names == tuple(CLASSES12)
    assert ds.train_keys.shape == ds.train_y.shape and ds.train_keys.dtype == np.int64
    assert np.isfinite(ds.train_x).all()
    assert ds.input_mean[0] == pytest.approx(float(ds.train_x.mean()), rel=1e-5)
    assert "TEST set" in ds.description and "speaker" in ds.description
    # 10 speakers -> 2 in test, all of their clips; none shared with train.
    spk = np.array([speech_commands.speaker_of(f) for f in names], dtype=object)
    test_ds = speech_commands.load_speech_commands_shared(feature="waveform")
    assert test_ds.test_x.shape[0] == 2 * 3 + 1  # 2 speakers x 3 clips + round(0.2 * 5) silence
    # the same call is deterministic
    again = speech_commands.load_speech_commands_shared()
    np.testing.assert_array_equal(ds.train_keys, again.train_keys)
    np.testing.assert_array_equal(ds.test_y, again.test_y)
    assert len(set(spk[spk != None])) == 10  # noqa: E711


def test_speech_speakers_disjoint_and_keys(speech_dir):
    _, _, names, _, _ = speech_dir
    ds = speech_commands.load_speech_commands_shared(feature="waveform", silence="own")
    # recover which rows went where by matching the (unique) waveforms
    with np.load(speech_dir[1]) as z:
        audio = z["audio"]
    row_of = {audio[i].tobytes(): i for i in range(len(audio))}
    tr = np.array([row_of[x.tobytes()] for x in ds.train_x])
    te = np.array([row_of[x.tobytes()] for x in ds.test_x])
    spk = [speech_commands.speaker_of(names[i]) for i in range(len(names))]
    tr_spk = {spk[i] for i in tr if spk[i]}
    te_spk = {spk[i] for i in te if spk[i]}
    assert tr_spk and te_spk and not (tr_spk & te_spk)
    # keys: same speaker <-> same key; silence clips each have their own key under "own"
    for a, b in [(0, 1), (0, 2)]:
        assert (ds.train_keys[a] == ds.train_keys[b]) == (spk[tr[a]] == spk[tr[b]])
    silent = np.array([spk[i] is None for i in tr])
    assert len(np.unique(ds.train_keys[silent])) == silent.sum()
    assert not set(ds.train_keys[silent]) & set(ds.train_keys[~silent])
    spread = speech_commands.load_speech_commands_shared(feature="waveform", silence="spread")
    assert set(spread.train_keys) == set(ds.train_keys[~silent])
    assert ds.input_scale == pytest.approx(1 / 32768) and ds.train_x.dtype == np.int16


def test_speech_35_words_drops_silence(speech_dir):
    ds = speech_commands.load_speech_commands_shared(labels="35", feature="waveform")
    assert ds.num_classes == len(WORDS) - 1 and ds.class_names == tuple(WORDS[1:])
    assert ds.train_x.shape[0] + ds.test_x.shape[0] == 30  # the 5 silence clips are gone


def test_speech_cache_reused(speech_dir, monkeypatch, tmp_path):
    first = speech_commands.load_speech_commands_shared()
    assert len(list((tmp_path / "cache").glob("speech_commands_logmel-*.npz"))) == 1

    def boom(*a, **k):
        raise AssertionError("features recomputed despite a cache entry")

    monkeypatch.setattr(speech_commands, "_features", boom)
    second = speech_commands.load_speech_commands_shared()
    np.testing.assert_array_equal(first.train_x, second.train_x)


def test_speech_errors(tmp_path, monkeypatch, speech_dir):
    with pytest.raises(ValueError, match="labels"):
        speech_commands.load_speech_commands_shared(labels="10")
    with pytest.raises(ValueError, match="feature"):
        speech_commands.load_speech_commands_shared(feature="mfcc")
    with pytest.raises(ValueError, match="silence"):
        speech_commands.load_speech_commands_shared(silence="drop")
    with pytest.raises(FileNotFoundError):
        speech_commands.load_speech_commands_shared(data_dir=tmp_path)
    bad = tmp_path / "bad"
    (bad / "speech_commands").mkdir(parents=True)
    np.savez(bad / speech_commands.SHARED_RELPATH, audio=np.zeros((2, 16000), np.int16))
    with pytest.raises(ValueError, match="missing keys"):
        speech_commands.load_speech_commands_shared(data_dir=bad)


# ---------------------------------------------------------------- embedded digits, registry

def test_digits_embedded():
    ds = embedded.load_digits_embedded()
    assert ds.train_x.shape == (1437, 32, 32, 3) and ds.test_x.shape == (360, 32, 32, 3)
    assert ds.train_x.dtype == np.uint8 and ds.train_x.max() == 255 and ds.train_x.min() == 0
    assert ds.num_classes == 10
    np.testing.assert_array_equal(ds.train_x[..., 0], ds.train_x[..., 2])  # grey in 3 channels
    blocks = ds.train_x[:, :, :, 0].reshape(-1, 8, 4, 8, 4)
    assert np.all(blocks == blocks[:, :, :1, :, :1])  # 4x4 nearest-neighbour blocks
    counts = np.bincount(ds.test_y, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified
    x = ds.train_x.reshape(-1, 3) / 255.0
    np.testing.assert_allclose(ds.input_mean, x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(ds.input_std, x.std(0), rtol=1e-6)
    all_y = np.concatenate([ds.train_y, ds.test_y])
    np.testing.assert_array_equal(np.bincount(all_y), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180])
    again = embedded.load_digits_embedded()
    np.testing.assert_array_equal(ds.test_y, again.test_y)
    assert not np.array_equal(ds.test_y, embedded.load_digits_embedded(seed=1).test_y)


def test_stratified_split():
    y = np.repeat(np.arange(3), [10, 20, 31])
    tr, te = embedded.stratified_split(y, 12, seed=0)
    assert len(te) == 12 and len(tr) == 49 and not set(tr) & set(te)
    np.testing.assert_array_equal(np.bincount(y[te]), [2, 4, 6])
    with pytest.raises(ValueError):
        embedded.stratified_split(y, 0)


@pytest.mark.slow
def test_digits_fast_path_matches_sklearn():
    from sklearn.datasets import load_digits

    images, labels = embedded._digits_raw()
    ref = load_digits()
    np.testing.assert_array_equal(images, ref.images)
    np.testing.assert_array_equal(labels, ref.target)


def test_load_dataset_registry():
    assert loaders.load_dataset("digits").name == "digits"
    with pytest.raises(ValueError, match="unknown data set"):
        loaders.load_dataset("mnist")
    assert set(loaders.LOADERS) >= {"digits", "cifar10", "speech_commands"}


# ---------------------------------------------------------------- the real shared copy

@pytest.mark.slow
@needs_data(CIFAR10_FILE)
def test_real_shared_cifar10(monkeypatch):
    monkeypatch.setenv("FELIX_JAX_DATA", str(DATA_DIR))
    t0 = time.perf_counter()
    ds = cifar10.load_cifar10_shared()
    first = time.perf_counter() - t0
    assert ds.train_x.shape == (50000, 32, 32, 3) and ds.test_x.shape == (10000, 32, 32, 3)
    np.testing.assert_array_equal(np.bincount(ds.train_y), [5000] * 10)
    np.testing.assert_array_equal(np.bincount(ds.test_y), [1000] * 10)
    mean = ds.train_x.reshape(-1, 3).mean(0) / 255.0
    np.testing.assert_allclose(mean, (0.491, 0.482, 0.447), atol=0.003)
    t0 = time.perf_counter()
    cached = cifar10.load_cifar10_shared()
    print(f"\nCIFAR-10 shared: first load {first:.1f} s, cached {time.perf_counter() - t0:.2f} s")
    np.testing.assert_array_equal(cached.test_x, ds.test_x)


# ---------------------------------------------------------------- damaged archives name their file

def test_cifar_shared_truncated_or_corrupt_archive_names_its_file(cifar_dir):
    from felix_jax.data.paths import DataFileError

    root = cifar_dir[0]
    target = root / cifar10.SHARED_RELPATH
    raw = target.read_bytes()
    target.write_bytes(raw[: len(raw) // 2])  # truncated: the zip directory at the end is gone
    with pytest.raises(DataFileError) as err:
        cifar10.load_cifar10_shared(cache=False)
    assert err.value.path == str(target) and "cannot read it as the CIFAR-10 JPEG-bytes archive" in str(err.value)
    # intact directory, damaged member: the CRC check fails only when the array is read
    at = raw.index(b"\xff\xd8") + 40
    target.write_bytes(raw[:at] + bytes(b ^ 0xFF for b in raw[at:at + 16]) + raw[at + 16:])
    with pytest.raises(DataFileError, match="cifar10_jpeg_bytes.npz: cannot read it as"):
        cifar10.load_cifar10_shared(cache=False)


def test_cifar_shared_corrupt_cache_entry_warns_and_rebuilds(cifar_dir, tmp_path):
    cifar10.load_cifar10_shared()
    (entry,) = (tmp_path / "cache").glob("cifar10_jpeg-*.npz")
    entry.write_bytes(entry.read_bytes()[:100])
    with pytest.warns(RuntimeWarning, match=entry.name):
        ds = cifar10.load_cifar10_shared()
    assert ds.train_x.shape == (8, 32, 32, 3)


def test_cifar_binary_truncated_archive_names_its_file(cifar_binary, tmp_path):
    from felix_jax.data.paths import DataFileError

    path = cifar_binary[0]
    cut = tmp_path / "cut.tar.gz"
    raw = path.read_bytes()
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataFileError, match="cut.tar.gz: cannot read it as a readable tar archive"):
        cifar10.load_cifar10_binary(cut)


def test_speech_truncated_archive_names_its_file(tmp_path):
    from felix_jax.data.paths import DataFileError

    target = tmp_path / speech_commands.SHARED_RELPATH
    target.parent.mkdir(parents=True)
    np.savez(target, audio=np.zeros((2, 16000), np.int16), label12=np.zeros(2, np.int64))
    raw = target.read_bytes()
    target.write_bytes(raw[: len(raw) - 30])
    with pytest.raises(DataFileError, match="cannot read it as the Speech Commands archive"):
        speech_commands.load_speech_commands_shared(data_dir=tmp_path)

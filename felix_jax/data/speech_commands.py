"""Google Speech Commands v0.02 loaders (keyword spotting, clients = speakers).

:func:`load_speech_commands_shared` reads the offline copy of the official
*test* set (4,890 one-second clips, 16 kHz int16) and, because that is the only
split available offline, re-splits it into train/test **by speaker**.
:func:`load_speech_commands_tfds` loads the full data set (about 105k clips)
through tensorflow-datasets on a machine with network access.

Features are log-mel spectrograms from :mod:`felix_jax.data.features`
(25 ms / 10 ms, 40 mel bands: ``(98, 40, 1)`` float32 per clip, a trailing
channel axis so an image CNN can take it), or the raw waveform.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import wave
from pathlib import Path

import numpy as np

from .cache import cached_arrays, source_fingerprint
from .dataset import ArrayDataset
from .features import log_mel_in_chunks
from .paths import DataFileError, atomic_file, data_file, open_npz, reading

SHARED_RELPATH = "speech_commands/speech_commands_v0.02_test.npz"
# the canonical test-set archive (felix-jax data fetch speech_commands), converted once into SHARED_RELPATH
TEST_ARCHIVE_RELPATH = "speech_commands/speech_commands_test_set_v0.02.tar.gz"
COMMAND_WORDS = ("down", "go", "left", "no", "off", "on", "right", "stop", "up", "yes")
CLASSES12 = ("_silence_", "_unknown_") + COMMAND_WORDS
# the 35 words of v0.02, after _silence_ (the ``word`` codes)
WORDS = ("_silence_", "backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward", "four",
         "go", "happy", "house", "learn", "left", "marvin", "nine", "no", "off", "on", "one", "right", "seven",
         "sheila", "six", "stop", "three", "tree", "two", "up", "visual", "wow", "yes", "zero")
SAMPLE_RATE = 16000
CLIP_SAMPLES = 16000
LOGMEL_PARAMS = dict(sample_rate=16000, n_fft=512, win_length=400, hop_length=160, n_mels=40, fmin=20.0, fmax=8000.0)
_CACHE_VERSION = 1
_SPEAKER_RE = re.compile(r"(?:^|_)([^_]+)_nohash_")


def speaker_of(filename: str) -> str | None:
    """Speaker id of a Speech Commands file name: the token just before ``_nohash_``.

    ``"fdb5155e_nohash_0.wav"`` and ``"backward_0c540988_nohash_0.wav.wav"`` (a word
    prefix, as in the offline copy's non-command words) give ``"fdb5155e"`` and
    ``"0c540988"``; names without ``_nohash_`` (the ``_silence_`` clips cut from
    background noise) give None.
    """
    m = _SPEAKER_RE.search(os.path.basename(str(filename)))
    return m.group(1) if m else None


_EXPECTED = "the Speech Commands archive (npz arrays audio, label12, classes12, word, words, filenames)"


def _open_npz(path):
    """Open and check the archive; returns the lazy NpzFile (audio not yet read)."""
    with reading(path, _EXPECTED):
        z = open_npz(path)
    need = {"audio", "label12", "classes12", "word", "words", "filenames"}
    missing = need - set(z.files)
    if missing:
        z.close()
        raise DataFileError(path, f"not a Speech Commands archive (missing keys {sorted(missing)})")
    return z


def _read_meta(z, path) -> dict[str, np.ndarray]:
    with reading(path, _EXPECTED):
        meta = {k: z[k] for k in ("label12", "classes12", "word", "words", "filenames")}
    n = meta["label12"].shape[0]
    if any(meta[k].shape != (n,) for k in ("word", "filenames")):
        raise DataFileError(path, f"inconsistent shapes (label12 {meta['label12'].shape}, "
                                  f"word {meta['word'].shape}, filenames {meta['filenames'].shape})")
    return meta


def _read_audio(z, path, n) -> np.ndarray:
    with reading(path, _EXPECTED):
        audio = z["audio"]
    if audio.ndim != 2 or audio.shape[0] != n:
        raise DataFileError(path, f"audio has shape {audio.shape}, expected ({n}, samples)")
    return audio


def _features(audio: np.ndarray, feature: str) -> dict[str, np.ndarray]:
    if feature == "logmel":
        return {"x": log_mel_in_chunks(audio, chunk_size=256, **LOGMEL_PARAMS)[..., None]}
    if feature == "waveform":
        return {"x": np.asarray(audio, np.int16)}
    raise ValueError(f"feature must be 'logmel' or 'waveform', got {feature!r}")


def convert_test_archive(archive: str | os.PathLike, out: str | os.PathLike) -> Path:
    """The official test-set archive (``speech_commands_test_set_v0.02.tar.gz``: a folder per class of the
    12-class task, ``_silence_``, ``_unknown_`` and the ten commands, of 16 kHz mono 16-bit WAV clips)
    as the npz :func:`load_speech_commands_shared` reads, written atomically at ``out``.

    Clips are zero-padded (or cut) to one second and ordered by class then file name; ``word`` is the
    class folder for a command, the file name's prefix for an ``_unknown_`` clip
    (``backward_0c540988_nohash_0.wav.wav``) and ``_silence_`` (0) for a silence clip. Raises
    DataFileError naming the archive for a member that is not such a clip."""
    archive, out = Path(archive), Path(out)
    code12 = {c: i for i, c in enumerate(CLASSES12)}
    code35 = {w: i for i, w in enumerate(WORDS)}
    clips: list[tuple[int, str, int, np.ndarray]] = []
    with reading(archive, "the Speech Commands test-set archive (a tar.gz of <class>/<clip>.wav)"), \
            tarfile.open(archive, "r:*") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if not member.isfile() or not member.name.endswith(".wav") or len(parts) < 2 \
                    or parts[-2] not in code12:
                continue
            label, name = parts[-2], parts[-1]
            if label == "_unknown_":
                word = name.split("_", 1)[0]
            else:
                word = "_silence_" if label == "_silence_" else label
            if word not in code35:
                raise DataFileError(archive, f"{member.name}: word {word!r} is not one of Speech Commands' 35")
            try:
                with wave.open(io.BytesIO(tar.extractfile(member).read())) as w:
                    form = (w.getframerate(), w.getsampwidth(), w.getnchannels())
                    pcm = np.frombuffer(w.readframes(CLIP_SAMPLES), "<i2") if form == (SAMPLE_RATE, 2, 1) else None
            except (wave.Error, EOFError) as e:
                raise DataFileError(archive, f"{member.name}: not a WAV clip ({e})") from None
            if pcm is None:
                raise DataFileError(archive, f"{member.name}: {form[0]} Hz, {8 * form[1]}-bit, {form[2]} channel(s); "
                                             "expected 16 kHz 16-bit mono")
            clip = np.zeros(CLIP_SAMPLES, np.int16)
            clip[:pcm.size] = pcm
            clips.append((code12[label], name, code35[word], clip))
    if not clips:
        raise DataFileError(archive, "holds no <class>/<clip>.wav member of the 12-class task")
    clips.sort(key=lambda c: (c[0], c[1]))
    arrays = {"audio": np.stack([c[3] for c in clips]), "label12": np.array([c[0] for c in clips], np.uint8),
              "classes12": np.array(CLASSES12), "word": np.array([c[2] for c in clips], np.uint8),
              "words": np.array(WORDS), "filenames": np.array([c[1] for c in clips])}
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(out) as f:
        np.savez(f, **arrays)
    return out


def speaker_split(
    speakers: np.ndarray, test_fraction: float, seed: int
) -> np.ndarray:
    """Boolean test mask: a seeded ``test_fraction`` of the distinct speakers (rounded)
    go wholly to the test split. ``speakers`` are integer codes; code -1 (no
    speaker) is split clip by clip with the same fraction."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5C]))
    uniq = np.unique(speakers[speakers >= 0])
    n_test = int(round(test_fraction * len(uniq)))
    test_spk = rng.permutation(uniq)[:n_test]
    is_test = np.isin(speakers, test_spk)
    loose = np.flatnonzero(speakers < 0)
    n_loose = int(round(test_fraction * len(loose)))
    is_test[rng.permutation(loose)[:n_loose]] = True
    return is_test


def load_speech_commands_shared(
    data_dir: str | os.PathLike | None = None,
    labels: str = "12",
    feature: str = "logmel",
    *,
    test_fraction: float = 0.2,
    seed: int = 0,
    silence: str = "spread",
    cache: bool = True,
) -> ArrayDataset:
    """Speech Commands v0.02 from the offline copy of its official **test set**.

    The archive ``<data_dir>/speech_commands/speech_commands_v0.02_test.npz`` holds
    only the 4,890-clip test set (not the 105k-clip training set), so this loader
    splits it into its own train and test parts **by speaker**: a seeded
    ``test_fraction`` (default 20%) of the speakers, with all their clips, form
    the test split; no speaker appears in both. This is a real but small task and
    its accuracies are not comparable to results on the official splits; use
    :func:`load_speech_commands_tfds` for those.

    ``train_keys`` is the speaker (integer codes, in sorted order of the speaker
    ids, i.e. the file-name part before ``_nohash_``) for
    :func:`felix_jax.data.partition.partition_by_key`. The ``_silence_`` clips have
    no speaker: they are split 80/20 clip by clip and, with ``silence="spread"``
    (default), each training silence clip is given the key of a seeded random
    training speaker (as if every device also recorded some background noise);
    ``silence="own"`` gives each its own key instead (one-clip clients under
    ``partition_by_key``).

    Args:
      data_dir: the data folder; default the data home (``$FELIX_JAX_DATA``, else the user cache's
        ``data/``, where ``felix-jax data fetch speech_commands`` puts it).
      labels: ``"12"`` (10 commands + ``_unknown_`` + ``_silence_``, the standard
        task) or ``"35"`` (the 35 words; silence clips dropped; the 25 non-command
        words have only 6-34 clips each in this copy).
      feature: ``"logmel"`` (float32 ``(98, 40, 1)``, see :mod:`.features`; computed
        in JAX in chunks and cached) or ``"waveform"`` (int16 ``(16000,)``,
        ``input_scale = 1/32768``).
      test_fraction, seed: the speaker split.
      silence: ``"spread"`` or ``"own"`` (see above).
      cache: use the on-disk feature cache (``$FELIX_JAX_CACHE``).

    ``input_mean`` / ``input_std`` are the train split's global feature mean/std.
    """
    if labels not in ("12", "35"):
        raise ValueError(f"labels must be '12' or '35', got {labels!r}")
    if feature not in ("logmel", "waveform"):
        raise ValueError(f"feature must be 'logmel' or 'waveform', got {feature!r}")
    if silence not in ("spread", "own"):
        raise ValueError(f"silence must be 'spread' or 'own', got {silence!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    path = data_file(SHARED_RELPATH, data_dir)
    with _open_npz(path) as z:
        raw = _read_meta(z, path)
        n = raw["label12"].shape[0]
        if feature == "logmel":
            x = cached_arrays(
                "speech_commands_logmel",
                {"source": source_fingerprint(path), "params": LOGMEL_PARAMS, "version": _CACHE_VERSION},
                lambda: _features(_read_audio(z, path, n), "logmel"),
                enabled=cache,
            )["x"]
            if x.shape[0] != n:
                raise DataFileError(path, f"cached features have {x.shape[0]} rows, expected {n}")
        else:
            x = _read_audio(z, path, n).astype(np.int16)

    names = [str(f) for f in raw["filenames"]]
    spk_ids = [speaker_of(f) for f in names]
    uniq = sorted({s for s in spk_ids if s is not None})
    code = {s: i for i, s in enumerate(uniq)}
    speakers = np.array([code[s] if s is not None else -1 for s in spk_ids], np.int64)

    if labels == "12":
        y = raw["label12"].astype(np.int32)
        class_names = tuple(str(c) for c in raw["classes12"])
        keep = np.ones(len(y), bool)
    else:
        words = [str(w) for w in raw["words"]]
        if words[0] != "_silence_":
            raise DataFileError(path, f"expected words[0] == '_silence_', got {words[0]!r}")
        keep = raw["word"] != 0
        y = raw["word"].astype(np.int32) - 1
        class_names = tuple(words[1:])

    is_test = speaker_split(speakers, test_fraction, seed)
    tr, te = keep & ~is_test, keep & is_test
    keys = speakers[tr].copy()
    loose = keys < 0
    pool = np.unique(keys[~loose])
    if loose.any():
        if silence == "spread" and pool.size:
            rng = np.random.default_rng(np.random.SeedSequence([seed, 0x51]))
            keys[loose] = rng.choice(pool, size=int(loose.sum()))
        else:
            keys[loose] = len(uniq) + np.arange(int(loose.sum()))

    train_x, test_x = x[tr], x[te]
    if feature == "logmel":
        mean, std = float(train_x.mean()), float(train_x.std())
        scale = 1.0
    else:
        scale = 1.0 / 32768.0
        mean, std = 0.0, float((train_x.astype(np.float32) * scale).std())
    n_spk_tr = len(np.unique(speakers[tr & (speakers >= 0)]))
    n_spk_te = len(np.unique(speakers[te & (speakers >= 0)]))
    desc = (
        f"Speech Commands v0.02, {labels}-class, {feature}. Built from the official TEST set only "
        f"(4,890 clips; the offline copy has no training set), re-split by speaker (seed {seed}): "
        f"{int(tr.sum())} train clips from {n_spk_tr} speakers, {int(te.sum())} test clips from "
        f"{n_spk_te} other speakers. Small task; not comparable to results on the official splits."
    )
    return ArrayDataset(
        name=f"speech_commands{labels}",
        train_x=train_x, train_y=y[tr], test_x=test_x, test_y=y[te],
        num_classes=len(class_names), class_names=class_names,
        train_keys=keys, input_scale=scale, input_mean=(mean,), input_std=(std,),
        description=desc,
    )


def load_speech_commands_tfds(
    data_dir: str | os.PathLike | None = None,
    feature: str = "logmel",
    *,
    cache: bool = True,
) -> ArrayDataset:
    """The full Speech Commands (tfds ``speech_commands``, 12 classes) through
    tensorflow-datasets: ``train`` (~85.5k clips) for training, ``test`` (4,890).

    Needs network access the first time and the tfds extra (tensorflow-datasets, TensorFlow and,
    for tfds 4.9.10, ``importlib_resources``); tensorflow-datasets is imported lazily and a clear
    ImportError is raised without them (:func:`~.user.import_tfds`). Clips are zero-padded / cut to 1 s.
    tfds exposes no speaker ids, so ``train_keys`` is None (partition by label
    or IID instead). Log-mel features are cached like the shared loader's.

    Args:
      data_dir: the tfds data folder (tfds's default when None).
      feature: ``"logmel"`` or ``"waveform"``.
    """
    if feature not in ("logmel", "waveform"):
        raise ValueError(f"feature must be 'logmel' or 'waveform', got {feature!r}")
    from .user import import_tfds, tfds_failed

    tfds = import_tfds("dataset=speech_commands_tfds (offline: dataset=speech_commands)")
    kwargs = {} if data_dir is None else {"data_dir": os.fspath(data_dir)}

    def split_arrays(split):
        ds = builder.as_dataset(split=split, as_supervised=True)
        clips, ys = [], []
        for audio, label in tfds.as_numpy(ds):
            a = np.zeros(CLIP_SAMPLES, np.int16)
            a[: min(len(audio), CLIP_SAMPLES)] = audio[:CLIP_SAMPLES]
            clips.append(a)
            ys.append(label)
        return np.stack(clips), np.asarray(ys, np.int32)

    try:
        builder = tfds.builder("speech_commands", **kwargs)
        builder.download_and_prepare()
        (tr_a, tr_y), (te_a, te_y) = split_arrays("train"), split_arrays("test")
    except Exception as e:
        raise tfds_failed("dataset=speech_commands_tfds", e) from e
    class_names = tuple(builder.info.features["label"].names)
    if feature == "logmel":
        feats = cached_arrays(
            "speech_commands_tfds_logmel",
            {"tfds": str(builder.data_dir), "version_tfds": str(builder.info.version),
             "params": LOGMEL_PARAMS, "version": _CACHE_VERSION},
            lambda: {"tr": _features(tr_a, "logmel")["x"], "te": _features(te_a, "logmel")["x"]},
            enabled=cache,
        )
        train_x, test_x, scale = feats["tr"], feats["te"], 1.0
        mean, std = float(train_x.mean()), float(train_x.std())
    else:
        train_x, test_x, scale = tr_a, te_a, 1.0 / 32768.0
        mean, std = 0.0, float((tr_a.astype(np.float32) * scale).std())
    return ArrayDataset(
        name="speech_commands12",
        train_x=train_x, train_y=tr_y, test_x=test_x, test_y=te_y,
        num_classes=len(class_names), class_names=class_names,
        input_scale=scale, input_mean=(mean,), input_std=(std,),
        description=f"Speech Commands (tensorflow-datasets, official train/test splits), 12-class, {feature}.",
    )

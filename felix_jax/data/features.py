"""Log-mel spectrograms in pure ``jax.numpy`` (jit-able, batched over clips).

Defaults are the usual keyword-spotting front end: 16 kHz audio, 25 ms Hann
window (400 samples) every 10 ms (160 samples), 512-point FFT, 40 mel bands from
20 Hz to 8 kHz, ``log(mel power + 1e-6)``. A one-second clip gives 98 frames
(no centre padding: ``1 + (16000 - 400) // 160``).

Mel scale: HTK, ``mel(f) = 2595 * log10(1 + f / 700)``. The filterbank has
triangular filters with peak 1 (no area normalisation) whose corners sit on
``n_mels + 2`` points equally spaced in mel between ``fmin`` and ``fmax``; between
the first and last filter centres the filters sum to 1 at every frequency.
The filterbank matrix is built once in numpy; the framing, windowing, FFT and
projection run in JAX.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def hz_to_mel(f):
    """HTK mel scale."""
    return 2595.0 * np.log10(1.0 + np.asarray(f, np.float64) / 700.0)


def mel_to_hz(m):
    """Inverse of :func:`hz_to_mel`."""
    return 700.0 * (10.0 ** (np.asarray(m, np.float64) / 2595.0) - 1.0)


def mel_filterbank(
    sample_rate: int = 16000,
    n_fft: int = 512,
    n_mels: int = 40,
    fmin: float = 20.0,
    fmax: float | None = None,
) -> np.ndarray:
    """Triangular HTK-mel filterbank, float32 ``(n_fft // 2 + 1, n_mels)``.

    ``power_spectrum @ filterbank`` gives mel-band power. Column ``j`` is the
    triangle rising from mel point ``j`` to a peak of 1 at point ``j + 1`` and
    falling to 0 at point ``j + 2`` (points equally spaced in mel from ``fmin``
    to ``fmax``, default ``sample_rate / 2``), evaluated at the FFT bin
    frequencies ``k * sample_rate / n_fft``.
    """
    fmax = sample_rate / 2.0 if fmax is None else float(fmax)
    if not 0.0 <= fmin < fmax <= sample_rate / 2.0:
        raise ValueError(f"need 0 <= fmin < fmax <= sample_rate/2, got fmin={fmin}, fmax={fmax}")
    freqs = np.arange(n_fft // 2 + 1) * sample_rate / n_fft
    points = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    lo, mid, hi = points[:-2, None], points[1:-1, None], points[2:, None]
    rising = (freqs[None, :] - lo) / (mid - lo)
    falling = (hi - freqs[None, :]) / (hi - mid)
    fb = np.clip(np.minimum(rising, falling), 0.0, None)
    return fb.T.astype(np.float32)


def hann_window(length: int) -> np.ndarray:
    """Periodic Hann window (the STFT convention), float32 ``(length,)``."""
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)).astype(np.float32)


def frame_signal(x: jax.Array, frame_length: int, hop_length: int) -> jax.Array:
    """Split the last axis into overlapping frames: ``(..., T) -> (..., F, frame_length)``
    with ``F = 1 + (T - frame_length) // hop_length`` (trailing samples dropped)."""
    t = x.shape[-1]
    if t < frame_length:
        raise ValueError(f"signal of {t} samples is shorter than one frame ({frame_length})")
    n_frames = 1 + (t - frame_length) // hop_length
    idx = np.arange(frame_length)[None, :] + hop_length * np.arange(n_frames)[:, None]
    return x[..., idx]


def power_spectrogram(
    audio: jax.Array, n_fft: int = 512, win_length: int = 400, hop_length: int = 160
) -> jax.Array:
    """``|rfft(hann * frame, n_fft)|^2``: ``(..., T) -> (..., F, n_fft // 2 + 1)``.

    Each frame of ``win_length`` samples is multiplied by a periodic Hann window
    and zero-padded at the end to ``n_fft`` points.
    """
    if win_length > n_fft:
        raise ValueError(f"win_length {win_length} > n_fft {n_fft}")
    frames = frame_signal(jnp.asarray(audio, jnp.float32), win_length, hop_length)
    spec = jnp.fft.rfft(frames * hann_window(win_length), n=n_fft, axis=-1)
    return jnp.real(spec) ** 2 + jnp.imag(spec) ** 2


@functools.partial(
    jax.jit,
    static_argnames=("sample_rate", "n_fft", "win_length", "hop_length", "n_mels", "fmin", "fmax", "eps"),
)
def log_mel_spectrogram(
    audio: jax.Array,
    sample_rate: int = 16000,
    n_fft: int = 512,
    win_length: int = 400,
    hop_length: int = 160,
    n_mels: int = 40,
    fmin: float = 20.0,
    fmax: float | None = None,
    eps: float = 1e-6,
) -> jax.Array:
    """Log-mel spectrogram of float audio in [-1, 1]: ``(..., T) -> (..., F, n_mels)`` float32.

    ``log(power_spectrogram(audio) @ mel_filterbank(...) + eps)``; batched over
    any leading axes, jitted (parameters static). Defaults: 25 ms / 10 ms at
    16 kHz, 512-point FFT, 40 HTK mel bands over 20 Hz - 8 kHz.
    """
    fb = mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)
    power = power_spectrogram(audio, n_fft, win_length, hop_length)
    mel = jnp.matmul(power, fb, precision=jax.lax.Precision.HIGHEST)
    return jnp.log(mel + eps)


def num_frames(num_samples: int, win_length: int = 400, hop_length: int = 160) -> int:
    """Frames :func:`log_mel_spectrogram` gives for ``num_samples`` samples."""
    return 1 + (num_samples - win_length) // hop_length


def log_mel_in_chunks(audio: np.ndarray, chunk_size: int = 256, scale: float | None = None, **kwargs) -> np.ndarray:
    """Host helper: log-mel features of a large ``(N, T)`` audio array, ``chunk_size``
    clips at a time (the last chunk padded, so it compiles once), as float32 numpy.

    ``scale`` multiplies the samples first (default: ``1/32768`` for int16 input,
    1 otherwise). ``kwargs`` go to :func:`log_mel_spectrogram`.
    """
    audio = np.asarray(audio)
    if scale is None:
        scale = 1.0 / 32768.0 if audio.dtype == np.int16 else 1.0
    n = audio.shape[0]
    out = None
    for start in range(0, n, chunk_size):
        chunk = audio[start:start + chunk_size].astype(np.float32) * np.float32(scale)
        m = chunk.shape[0]
        if m < chunk_size and n > chunk_size:
            chunk = np.concatenate([chunk, np.zeros((chunk_size - m,) + chunk.shape[1:], np.float32)])
        feats = np.asarray(log_mel_spectrogram(chunk, **kwargs))[:m]
        if out is None:
            out = np.empty((n,) + feats.shape[1:], np.float32)
        out[start:start + m] = feats
    if out is None:
        raise ValueError("no audio clips given")
    return out

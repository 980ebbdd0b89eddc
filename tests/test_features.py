"""Tests for felix_jax.data.features (log-mel front end in JAX)."""

import numpy as np
import pytest

from felix_jax.data import features as F

SR = 16000


def tone(freq, seconds=1.0, sr=SR):
    t = np.arange(int(seconds * sr)) / sr
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_shapes_and_dtype():
    x = np.stack([tone(440), tone(880), np.zeros(SR, np.float32)])
    out = F.log_mel_spectrogram(x)
    assert out.shape == (3, 98, 40) and out.dtype == np.float32
    assert F.num_frames(SR) == 98
    single = F.log_mel_spectrogram(x[0])
    assert single.shape == (98, 40)
    np.testing.assert_allclose(np.asarray(single), np.asarray(out[0]), rtol=1e-5, atol=1e-4)
    # silence -> log(eps)
    np.testing.assert_allclose(np.asarray(out[2]), np.log(1e-6), rtol=1e-6)
    assert F.log_mel_spectrogram(x, n_mels=64).shape == (3, 98, 64)


@pytest.mark.parametrize("freq", [250.0, 1000.0, 3000.0, 6000.0])
def test_sine_tone_lands_in_its_mel_band(freq):
    fb = F.mel_filterbank(SR, 512, 40, 20.0, None)
    k = int(round(freq * 512 / SR))  # freq is an exact bin frequency here
    expected = int(np.argmax(fb[k]))
    mel = np.exp(np.asarray(F.log_mel_spectrogram(tone(freq)))).mean(axis=0)
    assert int(np.argmax(mel)) == expected
    # the tone's band dominates bands far away from it by a wide margin
    far = np.abs(np.arange(40) - expected) > 3
    assert mel[expected] > 1000 * mel[far].max()


def test_filterbank_shape_and_partition_of_unity():
    fb = F.mel_filterbank(SR, 512, 40, 20.0, 8000.0)
    assert fb.shape == (257, 40) and fb.dtype == np.float32
    assert fb.min() >= 0 and fb.max() <= 1.0 + 1e-6
    assert np.all(fb.sum(axis=0) > 0), "every mel filter covers at least one FFT bin"
    centers = F.mel_to_hz(np.linspace(F.hz_to_mel(20.0), F.hz_to_mel(8000.0), 42))[1:-1]
    freqs = np.arange(257) * SR / 512
    inner = (freqs >= centers[0]) & (freqs <= centers[-1])
    np.testing.assert_allclose(fb[inner].sum(axis=1), 1.0, atol=1e-5)
    assert np.all(fb[freqs < 20.0].sum(axis=1) == 0)
    # filter peaks move up in frequency
    assert np.all(np.diff(np.argmax(fb, axis=0)) >= 0)


def test_mel_scale_roundtrip():
    f = np.array([0.0, 100.0, 1000.0, 8000.0])
    np.testing.assert_allclose(F.mel_to_hz(F.hz_to_mel(f)), f, atol=1e-6)
    assert abs(F.hz_to_mel(1000.0) - 1000.0) < 1.0  # HTK: 1000 Hz ~ 1000 mel


def test_power_spectrum_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4000).astype(np.float32)
    got = np.asarray(F.power_spectrogram(x, n_fft=512, win_length=400, hop_length=160))
    n = 1 + (4000 - 400) // 160
    frames = np.stack([x[i * 160:i * 160 + 400] for i in range(n)]).astype(np.float64)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)
    ref = np.abs(np.fft.rfft(frames * window, n=512, axis=-1)) ** 2
    assert got.shape == ref.shape == (n, 257)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3 * ref.max())


def test_frame_signal_and_errors():
    x = np.arange(10, dtype=np.float32)
    fr = np.asarray(F.frame_signal(x, 4, 3))
    np.testing.assert_array_equal(fr, [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]])
    with pytest.raises(ValueError):
        F.frame_signal(x, 20, 3)
    with pytest.raises(ValueError):
        F.mel_filterbank(SR, 512, 40, 20.0, 9000.0)
    with pytest.raises(ValueError):
        F.power_spectrogram(x, n_fft=2, win_length=4, hop_length=1)


def test_log_mel_in_chunks_matches_direct_and_scales_int16():
    rng = np.random.default_rng(1)
    audio = (rng.standard_normal((5, SR)) * 3000).astype(np.int16)
    direct = np.asarray(F.log_mel_spectrogram(audio.astype(np.float32) / 32768.0))
    chunked = F.log_mel_in_chunks(audio, chunk_size=2)
    assert chunked.shape == (5, 98, 40) and chunked.dtype == np.float32
    np.testing.assert_allclose(chunked, direct, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError):
        F.log_mel_in_chunks(np.zeros((0, SR), np.int16))

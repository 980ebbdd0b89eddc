"""Random access into numpy's PCG64 stream, vectorized (the on-demand slot traces, docs/architecture.md).

``np.random.default_rng(seed)`` is a PCG64 generator: a 128-bit linear congruential state
``s <- s * MULT + inc (mod 2**128)`` whose every step yields one 64-bit word (the XSL-RR output
of the new state), and ``Generator.random()`` turns one word into one float64,
``(word >> 11) * 2**-53``. Because the state is an affine map, the state after ``n`` steps is
``A_n * s_0 + C_n`` for constants that depend on ``n`` only, so draw number ``n`` of the stream can
be computed without the ``n - 1`` before it. This module does that arithmetic on numpy uint64
pairs (high, low words), elementwise over arrays, and reproduces ``rng.random()``'s floats bit for
bit (tested against numpy on random indices).
"""

from __future__ import annotations

import math

import numpy as np

MULT = 0x2360ED051FC65DA44385DF649FCCF645  # PCG64's 128-bit multiplier (numpy's pcg64.h)
MASK64 = (1 << 64) - 1
MASK128 = (1 << 128) - 1
_MASK64, _MASK128 = MASK64, MASK128
_M32 = np.uint64(0xFFFFFFFF)
_U32 = np.uint64(32)
_U58 = np.uint64(58)
_U11 = np.uint64(11)
_U63 = np.uint64(63)
_U64 = np.uint64(64)
_TWO_M53 = 1.0 / 9007199254740992.0


def seed_state(seed) -> tuple[int, int]:
    """``(state, inc)``: the 128-bit state and increment of ``np.random.default_rng(seed)``."""
    if isinstance(seed, np.random.Generator):
        raise TypeError("an on-demand stream needs a seed (an int or a SeedSequence), not a Generator "
                        "whose position in its stream is unknown")
    state = np.random.default_rng(seed).bit_generator.state
    if state.get("bit_generator") != "PCG64":
        raise TypeError(f"np.random.default_rng gave {state.get('bit_generator')!r}, not PCG64")
    return int(state["state"]["state"]), int(state["state"]["inc"])


def jump(n: int, inc: int) -> tuple[int, int]:
    """``(A, C)`` with ``state_after_n_steps = (A * state + C) mod 2**128``, by repeated squaring."""
    if n < 0:
        raise ValueError(f"a stream only moves forward, got {n} steps")
    acc_a, acc_c = 1, 0
    cur_a, cur_c = MULT, inc
    while n:
        if n & 1:  # acc <- cur o acc
            acc_a, acc_c = (cur_a * acc_a) & _MASK128, (cur_a * acc_c + cur_c) & _MASK128
        cur_a, cur_c = (cur_a * cur_a) & _MASK128, (cur_a * cur_c + cur_c) & _MASK128
        n >>= 1
    return acc_a, acc_c


def split(values) -> tuple[np.ndarray, np.ndarray]:
    """Python ints below ``2**128`` as ``(high, low)`` uint64 arrays."""
    values = [int(v) for v in np.atleast_1d(np.asarray(values, dtype=object))]
    return (np.array([v >> 64 for v in values], dtype=np.uint64),
            np.array([v & _MASK64 for v in values], dtype=np.uint64))


def _mulhi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The high 64 bits of the 128-bit product of two uint64 arrays."""
    x0, x1 = x & _M32, x >> _U32
    y0, y1 = y & _M32, y >> _U32
    p01, p10 = x0 * y1, x1 * y0
    mid = ((x0 * y0) >> _U32) + (p01 & _M32) + (p10 & _M32)  # < 3 * 2**32: no overflow
    return x1 * y1 + (p01 >> _U32) + (p10 >> _U32) + (mid >> _U32)


def affine(a_hi, a_lo, c_hi, c_lo, s_hi, s_lo) -> tuple[np.ndarray, np.ndarray]:
    """``(A * s + C) mod 2**128`` elementwise, every operand a (high, low) uint64 pair (broadcast)."""
    with np.errstate(over="ignore"):
        lo = a_lo * s_lo
        hi = _mulhi(a_lo, s_lo) + a_lo * s_hi + a_hi * s_lo
        out_lo = lo + c_lo
        out_hi = hi + c_hi + (out_lo < lo).astype(np.uint64)
    return out_hi, out_lo


def _word(s_hi: np.ndarray, s_lo: np.ndarray) -> np.ndarray:
    """The 64-bit output of a state just stepped to ``s``: XSL-RR (xor the halves, rotate right by the top 6 bits)."""
    with np.errstate(over="ignore"):
        x = s_hi ^ s_lo
        rot = s_hi >> _U58
        return (x >> rot) | (x << ((_U64 - rot) & _U63))


def uniform(s_hi: np.ndarray, s_lo: np.ndarray) -> np.ndarray:
    """``Generator.random()``'s float64 for a state just stepped to ``s``: XSL-RR, then the top 53 bits."""
    return (_word(s_hi, s_lo) >> _U11).astype(np.float64) * _TWO_M53


def threshold(p: float) -> np.uint64:
    """The integer ``T`` with ``uniform(s) < p`` exactly when the draw's top 53 bits are below ``T``.

    ``uniform`` is ``m * 2**-53`` for the integer ``m`` of the top 53 bits, exact in float64, and
    ``p * 2**53`` is exact too (a power-of-two scaling), so ``m * 2**-53 < p`` iff ``m < ceil(p * 2**53)``.
    """
    return np.uint64(min(math.ceil(float(p) * 9007199254740992.0), 1 << 53))


def below(s_hi: np.ndarray, s_lo: np.ndarray, t: np.uint64) -> np.ndarray:
    """``uniform(s_hi, s_lo) < p`` for ``t = threshold(p)``, in integers (no float conversion)."""
    return (_word(s_hi, s_lo) >> _U11) < t


def join(hi, lo) -> int:
    """A (high, low) uint64 pair as one Python int."""
    return (int(hi) << 64) | int(lo)


def below_one(s: int, a: int, c: int, t: int) -> bool:
    """``below(affine(a, c, s), t)`` for one state, in Python integers (128-bit ints are exact and, for
    one draw, far cheaper than a dozen numpy calls on one-element arrays)."""
    s = (a * s + c) & MASK128
    hi, lo = s >> 64, s & MASK64
    x, rot = hi ^ lo, hi >> 58
    word = ((x >> rot) | (x << ((64 - rot) & 63))) & MASK64
    return (word >> 11) < t


def strided_states(seed_and_inc: tuple[int, int], count: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """The states after ``0, stride, 2 * stride, ...`` steps (``count`` of them) as (high, low) uint64 arrays.

    A first block of about ``sqrt(count)`` states one ``stride`` apart is stepped with Python ints;
    each next block is the previous one moved ``block * stride`` steps, one vectorized affine map,
    so the cost is ``O(sqrt(count))`` Python steps and ``O(count)`` vector work.
    """
    state, inc = seed_and_inc
    hi = np.empty(count, dtype=np.uint64)
    lo = np.empty(count, dtype=np.uint64)
    if count == 0:
        return hi, lo
    block = int(min(count, max(64, int(np.sqrt(count)))))
    a_s, c_s = jump(stride, inc)
    first = []
    cur = state
    for _ in range(block):
        first.append(cur)
        cur = (a_s * cur + c_s) & _MASK128
    hi[:block], lo[:block] = split(first)
    a_b, c_b = jump(block * stride, inc)
    (a_hi, c_hi), (a_lo, c_lo) = split([a_b, c_b])
    for start in range(block, count, block):
        stop = min(start + block, count)
        prev = slice(start - block, stop - block)
        hi[start:stop], lo[start:stop] = affine(a_hi, a_lo, c_hi, c_lo, hi[prev], lo[prev])
    return hi, lo

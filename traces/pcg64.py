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


class Column:
    """``below(affine(a, c, s), t)`` over contiguous runs of states ``s`` with one scalar map ``(a, c)``
    (a whole-slot column: every client's draw in one slot), written in place into ``out``.

    The same integers as ``affine`` / ``below`` step by step (tested equal), in a fixed set of
    ``chunk``-sized scratch buffers, every operation ``out=`` one of them: no temporary per step and a
    working set that stays in cache. ``(a, c)``'s 32-bit halves are split once per map, not per client.
    """

    def __init__(self, chunk: int = 1 << 14):
        self.chunk = int(chunk)
        self._buf = [np.empty(self.chunk, np.uint64) for _ in range(5)]
        self._carry = np.empty(self.chunk, bool)

    def below(self, a: tuple, c: tuple, s_hi: np.ndarray, s_lo: np.ndarray, t: np.uint64,
              out: np.ndarray) -> np.ndarray:
        """``out[i] = below(affine(a_hi, a_lo, c_hi, c_lo, s_hi[i], s_lo[i]), t)``; ``a``, ``c``: (high, low) uint64 scalars."""
        a_hi, a_lo = np.uint64(a[0]), np.uint64(a[1])
        c_hi, c_lo = np.uint64(c[0]), np.uint64(c[1])
        a0, a1 = a_lo & _M32, a_lo >> _U32
        n = s_lo.shape[0]
        with np.errstate(over="ignore"):
            for start in range(0, n, self.chunk):
                stop = min(start + self.chunk, n)
                m = stop - start
                y0, y1, p, q, hi = (b[:m] for b in self._buf)
                carry = self._carry[:m]
                sl, sh = s_lo[start:stop], s_hi[start:stop]
                # hi = mulhi(a_lo, s_lo) on 32-bit halves, as _mulhi does
                np.bitwise_and(sl, _M32, out=y0)
                np.right_shift(sl, _U32, out=y1)
                np.multiply(y0, a0, out=p)
                np.right_shift(p, _U32, out=p)  # (x0 * y0) >> 32
                np.multiply(y1, a0, out=q)  # p01
                np.multiply(y0, a1, out=y0)  # p10
                np.multiply(y1, a1, out=hi)
                np.right_shift(q, _U32, out=y1)
                np.add(hi, y1, out=hi)
                np.right_shift(y0, _U32, out=y1)
                np.add(hi, y1, out=hi)
                np.bitwise_and(q, _M32, out=q)
                np.add(p, q, out=p)
                np.bitwise_and(y0, _M32, out=y0)
                np.add(p, y0, out=p)  # mid < 3 * 2**32
                np.right_shift(p, _U32, out=p)
                np.add(hi, p, out=hi)
                # + a_lo * s_hi + a_hi * s_lo, then + c with the low word's carry
                np.multiply(sh, a_lo, out=p)
                np.add(hi, p, out=hi)
                np.multiply(sl, a_hi, out=p)
                np.add(hi, p, out=hi)
                np.multiply(sl, a_lo, out=q)  # low word of the product
                np.add(q, c_lo, out=p)  # the new state's low word
                np.less(p, q, out=carry)
                np.add(hi, c_hi, out=hi)
                np.add(hi, carry, out=hi, casting="unsafe")
                # XSL-RR: x = hi ^ lo rotated right by hi >> 58, then its top 53 bits against t
                np.bitwise_xor(hi, p, out=q)
                np.right_shift(hi, _U58, out=hi)
                np.right_shift(q, hi, out=p)
                np.negative(hi, out=hi)
                np.bitwise_and(hi, _U63, out=hi)  # (64 - rot) & 63
                np.left_shift(q, hi, out=q)
                np.bitwise_or(p, q, out=p)
                np.right_shift(p, _U11, out=p)
                np.less(p, t, out=out[start:stop])
        return out


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

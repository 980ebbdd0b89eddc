"""The quick-start data set that needs no download: scikit-learn's digits.

:func:`load_digits_embedded` turns scikit-learn's bundled ``load_digits`` (1,797
real 8x8 handwritten-digit images, 10 classes; shipped inside the scikit-learn
wheel, so it works offline) into the CIFAR-like shape the paper's CNN takes.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from .dataset import ArrayDataset
from .paths import reading


def load_digits_embedded(num_test: int = 360, seed: int = 0) -> ArrayDataset:
    """scikit-learn's 8x8 digits as 32x32x3 uint8 images (1,437 train / 360 test).

    Each 8x8 image (grey levels 0..16) is upscaled 4x by nearest neighbour
    (``np.repeat``), mapped to uint8 ``round(v * 255 / 16)`` and replicated to
    three channels, giving the ``(32, 32, 3)`` input of the paper's CIFAR-10 CNN.
    The train/test split is stratified and seeded (``num_test`` images, default
    360). ``input_scale = 1/255``; mean/std are per channel from the train split.

    Why it is a fair stand-in for CIFAR-10 in quick starts and tests: the images
    are real (scanned handwriting from the UCI "Optical Recognition of
    Handwritten Digits" data, the 1,797-image part bundled with scikit-learn),
    the 10 classes are balanced (about 180 each), the same label-skew (Dirichlet)
    partitioning applies unchanged, and the model, input shape and
    code paths are exactly those of a CIFAR-10 run. But it is a much easier task
    and much smaller: a CNN reaches well over 90% test accuracy, so accuracy
    targets and times-to-target differ from the paper's CIFAR-10 numbers and must
    not be compared with them.
    """
    images8, labels = _digits_raw()
    grey = np.rint(images8 * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (N, 8, 8)
    big = np.repeat(np.repeat(grey, 4, axis=1), 4, axis=2)  # (N, 32, 32)
    images = np.ascontiguousarray(np.broadcast_to(big[..., None], big.shape + (3,)))
    idx_train, idx_test = stratified_split(labels, num_test, seed)
    train_x = images[idx_train]
    # Nearest-neighbour upscaling repeats every pixel 16 times and the channels are
    # equal, so the 8x8 grey images have the same per-channel mean and std.
    scaled = grey[idx_train].astype(np.float64) / 255.0
    mean = (float(scaled.mean()),) * 3
    std = (float(scaled.std()),) * 3
    return ArrayDataset(
        name="digits",
        train_x=train_x,
        train_y=labels[idx_train],
        test_x=images[idx_test],
        test_y=labels[idx_test],
        num_classes=10,
        class_names=tuple(str(d) for d in range(10)),
        input_scale=1.0 / 255.0,
        input_mean=mean,
        input_std=std,
        description=(
            "scikit-learn digits (1,797 real 8x8 handwritten digits, bundled, no download), "
            "upscaled to 32x32x3 uint8; stratified split "
            f"{len(idx_train)}/{len(idx_test)} (seed {seed}). Much easier than CIFAR-10: "
            "accuracies and targets are not comparable to the paper's."
        ),
    )


def _digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """(images float (1797, 8, 8) in 0..16, labels int32). Reads scikit-learn's bundled
    ``datasets/data/digits.csv.gz`` directly when present (importing
    ``sklearn.datasets`` costs seconds); otherwise calls ``sklearn.datasets.load_digits``."""
    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            with reading(path, "scikit-learn's bundled digits table (gzipped CSV)"):
                table = np.loadtxt(path, delimiter=",")
            if table.shape == (1797, 65):
                return table[:, :64].reshape(-1, 8, 8), table[:, 64].astype(np.int32)
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images, digits.target.astype(np.int32)


def stratified_split(labels: np.ndarray, num_test: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded stratified split: ``(train_idx, test_idx)``, both sorted.

    Each class gives ``floor(num_test * n_c / N)`` test samples; the remaining
    test slots go to the classes with the largest fractional remainders (ties: a
    seeded random order). Samples within a class are drawn by a seeded shuffle.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    if not 0 < num_test < n:
        raise ValueError(f"num_test must be in (0, {n}), got {num_test}")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    exact = num_test * counts / n
    take = np.floor(exact).astype(int)
    rest = num_test - take.sum()
    order = np.lexsort((rng.random(len(classes)), -(exact - take)))
    take[order[:rest]] += 1
    test = np.concatenate([
        rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, take)
    ])
    mask = np.zeros(n, bool)
    mask[test] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)

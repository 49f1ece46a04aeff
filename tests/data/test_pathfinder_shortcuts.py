"""The generated Pathfinder has no label shortcut in where its dots are: as in LRA's Pathfinder (Linsley et al. 2018;
Tay et al. 2021, Long Range Arena, 2.2.5) a negative's dots lie on two different contours, here at the same distance as a positive's,
so a classifier on dot distance or on pixel counts alone stays at chance on held-out images."""

import numpy as np

from seqssm.data.generators.pathfinder import PathfinderStyle, generate_pathfinder

# the stand-in the RoPE claim reads (seqssm/recipes/reproduce/rope/data.yaml): 24 x 24, 6 dashes, 1 distractor
STYLE = PathfinderStyle(res=24, dashes=6, distractors=1)
N_IMAGES = 800  # ~4 s; half to fit, half to score: chance's standard error is ~0.025 at 400 held out
N_BINS = 8


def dot_centres(images: np.ndarray, dot: int) -> list[np.ndarray]:
    """Per image (n, res, res), the (k, 2) centres of its filled (2*dot+1)^2 squares: the dots (k = 2)."""
    on = images > 0
    side, res = 2 * dot + 1, images.shape[1]
    full = np.ones((len(images), res - 2 * dot, res - 2 * dot), bool)
    for dy in range(side):
        for dx in range(side):
            full &= on[:, dy : dy + res - 2 * dot, dx : dx + res - 2 * dot]
    return [np.argwhere(f) + dot for f in full]


def shortcut_features(images: np.ndarray, dot: int) -> dict[str, np.ndarray]:
    """(n,) features that read no contour: the two dots' distance, the lit pixels in the dots' squares grown by one
    pixel (a dot on a contour's end shows the contour's first pixels there), and all lit pixels."""
    centres = dot_centres(images, dot)
    assert all(len(c) == 2 for c in centres), "every image has exactly two dots"
    near = np.zeros(len(images))
    r = dot + 1
    for i, (a, b) in enumerate(centres):
        for y, x in (a, b):
            near[i] += (images[i, max(0, y - r) : y + r + 1, max(0, x - r) : x + r + 1] > 0).sum()
    return {"distance": np.array([np.hypot(*(a - b)) for a, b in centres]),
            "pixels near the dots": near, "lit pixels": (images > 0).sum(axis=(1, 2)).astype(float)}


def held_out_accuracy(feature: np.ndarray, labels: np.ndarray, bins: int = N_BINS) -> float:
    """Accuracy on the second half of a histogram classifier fitted on the first: the feature cut at the first
    half's quantiles into `bins` bins, each bin predicting its majority label (any shape of dependence, not only a
    threshold)."""
    half = len(feature) // 2
    edges = np.quantile(feature[:half], np.linspace(0, 1, bins + 1)[1:-1])
    fit, score = np.searchsorted(edges, feature[:half]), np.searchsorted(edges, feature[half:])
    positives = np.bincount(fit, weights=labels[:half], minlength=bins)
    totals = np.bincount(fit, minlength=bins)
    predict = (positives > totals / 2).astype(int)
    return float(np.mean(predict[score] == labels[half:]))


def test_dot_distance_and_pixel_counts_carry_no_label():
    images, labels = generate_pathfinder(N_IMAGES, seed=3, style=STYLE)
    for name, feature in shortcut_features(images, STYLE.dot).items():
        accuracy = held_out_accuracy(feature, labels)
        assert abs(accuracy - 0.5) < 0.05, f"{name} alone classifies {accuracy:.3f} of held-out images"


def test_the_classifier_finds_a_band_shaped_shortcut():
    """The check has teeth where the shortcut was: positives' distances in a band (one contour's end-to-end length),
    negatives' spread around it, as before negatives were matched; a threshold would miss it, the bins do not."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, N_IMAGES)
    distance = np.where(labels == 1, rng.normal(13.7, 0.9, N_IMAGES), rng.uniform(5.4, 20.6, N_IMAGES))
    assert held_out_accuracy(distance, labels) > 0.75

"""Pathfinder generator: two dots, dashed curved contours and distractors on a dark canvas.

Every image holds two main contours and a few shorter distractors. Positive (label 1): both dots sit on the two
ends of the same contour; negative (0): one dot on an end of each main contour, as in LRA's Pathfinder (Linsley et
al. 2018; Tay et al. 2021, Long Range Arena, 2.2.5). Here a negative's dots are also exactly as far apart as a
positive's: the second main contour starts at a mirror image (a turn or reflection of the lattice offset) of the first
contour's far end about its dotted end, and the scene is drawn the same way for both labels. So only which contour each
dot touches tells the label, not the dots' distance (with the second contour placed anywhere, distance alone
classified ~0.85 of held-out images at 24 x 24 with 6 dashes). Different contours keep a gap of more than a dash gap
between them, so the label is decidable by following dashes (tests check it with a connected-component search).
Images are written as 8-bit grayscale PNGs in the LRA release layout:
`pathfinder{res}/<level>/imgs/<batch>/sample_<i>.png` and `metadata/<batch>.npy` (text rows
`imgs/<batch> sample_<i>.png <i> <label>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from seqssm.errors import ConfigError, check_int

from ..png import write_png

# Draws in a row that find no room for the contours before giving up (~2 s): at res 32 about 3 in 4 draws fail,
# below res ~20 every draw does, and the loop would otherwise never end.
MAX_FAILED_DRAWS = 200
# Bumped when the same settings draw other images, so that folders named by their settings are not reused across the
# change: 2 places a negative's dots on two contours at a positive's distance (no dot-distance shortcut).
GENERATOR_VERSION = 2


@dataclass(frozen=True)
class PathfinderStyle:
    """Geometry in pixels for resolution `res` (everything scales with res / 32)."""

    res: int = 32
    dashes: int = 10          # dashes per main contour (the LRA levels vary this: 6 / 9 / 14)
    distractors: int = 2      # short contours without dots
    curvature: float = 0.15   # std of the heading change (radians) per half-pixel step

    def __post_init__(self):
        check_int("pathfinder", "res", self.res)
        check_int("pathfinder", "dashes", self.dashes)
        check_int("pathfinder", "distractors", self.distractors, minimum=0)
        if not self.curvature >= 0:
            raise ConfigError(f"pathfinder: curvature must be >= 0 (radians), got {self.curvature!r}")

    @property
    def scale(self) -> float:
        return self.res / 32

    @property
    def dash(self) -> float:
        return 2.0 * self.scale

    @property
    def gap(self) -> int:
        return max(1, round(self.scale))

    @property
    def margin(self) -> int:
        """Minimum Chebyshev distance between pixels of different contours."""
        return self.gap + 2

    @property
    def stroke(self) -> int:
        return max(1, round(self.res / 64))

    @property
    def dot(self) -> int:
        return max(1, round(self.scale))


def _contour(rng: np.random.Generator, st: PathfinderStyle, dashes: int,
             start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(dash pixel coords (n, 2) as (y, x), end pixels (2, 2)) of one random dashed curve, from `start` (a pixel)
    or a uniform point."""
    period = st.dash + st.gap
    n_steps = int(np.ceil((dashes * period - st.gap) / 0.5))  # no gap after the last dash
    heading = rng.uniform(0, 2 * np.pi) + np.cumsum(rng.normal(0, st.curvature, n_steps))
    # a given start pixel gets a sub-pixel offset like a uniform start's: a curve from a pixel's centre would shade
    # the pixels around its end differently
    start = rng.uniform(0, st.res, size=2) if start is None else start + rng.uniform(-0.499, 0.499, size=2)
    pos = start + np.cumsum(0.5 * np.stack([np.sin(heading), np.cos(heading)], 1), axis=0)
    pos = np.concatenate([start[None], pos])
    arc = 0.5 * np.arange(len(pos))
    on = (arc % period) < st.dash
    # end on the last dash's last point, as the curve starts on a dash: both ends look alike under their dots
    last = np.flatnonzero(on)[-1]
    pix, on = np.rint(pos[: last + 1]).astype(np.int64), on[: last + 1]
    return pix[on], pix[[0, -1]]


def _mirror_images(centre: np.ndarray, point: np.ndarray) -> np.ndarray:
    """(7, 2) pixels at exactly `point`'s distance from `centre`: `point` turned about `centre` by a quarter, half
    and three-quarter turn, and reflected in the four lattice axes through it (the lattice's symmetries but the
    identity)."""
    dy, dx = point - centre
    offsets = [(-dy, -dx), (dx, -dy), (-dx, dy), (-dy, dx), (dy, -dx), (dx, dy), (-dx, -dy)]
    return centre + np.array(offsets)


def _stamp(mask: np.ndarray, pts: np.ndarray, half: int) -> None:
    """Set squares of side 2*half+1 (or `half`=0: single pixels) around pts (clipped)."""
    h, w = mask.shape
    for dy in range(-half, half + 1):
        for dx in range(-half, half + 1):
            y, x = pts[:, 0] + dy, pts[:, 1] + dx
            ok = (y >= 0) & (y < h) & (x >= 0) & (x < w)
            mask[y[ok], x[ok]] = True


def _dilate(mask: np.ndarray, r: int) -> np.ndarray:
    out = mask.copy()
    _stamp(out, np.argwhere(mask), r)
    return out


def draw_sample(rng: np.random.Generator, st: PathfinderStyle, label: int, tries: int = 200) -> np.ndarray | None:
    """(res, res) uint8 image with the given label, or None if the contours did not fit.

    The scene does not depend on the label: the first main contour, then the second starting at a mirror image of
    the first's far end about its near end (`_mirror_images`), then the distractors. Label 1 dots the first
    contour's two ends, label 0 its near end and the second contour's start: the same distance either way."""
    res = st.res
    taken = np.zeros((res, res), bool)   # pixels of contours placed so far (with their dots)
    canvas = np.zeros((res, res), bool)
    lo, hi = st.dot + st.stroke, res - 1 - st.dot - st.stroke
    near = far = None  # the first main contour's ends: the one dotted in both classes, the positive's other dot
    for k in range(2 + st.distractors):
        is_main = k < 2
        dashes = st.dashes if is_main else max(2, st.dashes // 3)
        blocked = _dilate(taken, st.margin - 1) if taken.any() else taken
        starts = [None]
        if k == 1:  # the second contour starts at the positive's dot distance from `near`, on free pixels
            starts = [p for p in _mirror_images(near, far)
                      if (p >= lo).all() and (p <= hi).all() and not blocked[p[0], p[1]]]
            if not starts:
                return None
        for _ in range(tries):
            pix, ends = _contour(rng, st, dashes, starts[rng.integers(len(starts))])
            shape = np.zeros((res, res), bool)
            inside = (pix >= lo).all() and (pix <= hi).all() and (ends >= lo).all() and (ends <= hi).all()
            if not inside:
                continue
            _stamp(shape, pix, st.stroke // 2)
            if is_main:  # reserve room for dots at both ends
                _stamp(shape, ends, st.dot)
            if not (shape & blocked).any():
                break
        else:
            if is_main:
                return None
            continue  # a distractor that does not fit is left out
        taken |= shape
        _stamp(canvas, pix, st.stroke // 2)
        if k == 0:
            side = rng.integers(2)
            near, far = ends[side], ends[1 - side]
        elif k == 1:
            negative_dot = ends[0]
    dots = [near, far] if label == 1 else [near, negative_dot]
    _stamp(canvas, np.array(dots), st.dot)
    return canvas.astype(np.uint8) * 255


def generate_pathfinder(n: int, seed: int, style: PathfinderStyle) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, res, res) uint8, labels (n,)) balanced at random, deterministic in `seed`."""
    check_int("pathfinder", "n", n)
    check_int("pathfinder", "seed", seed, minimum=0)  # numpy's generators take no negative seed
    rng = np.random.default_rng(seed)
    images = np.zeros((n, style.res, style.res), np.uint8)
    labels = rng.integers(0, 2, size=n)
    for i in tqdm(range(n), desc=f"pathfinder{style.res}", leave=False):
        for _ in range(MAX_FAILED_DRAWS):
            img = draw_sample(rng, style, int(labels[i]))
            if img is not None:
                break
        else:
            raise ConfigError(f"pathfinder: {MAX_FAILED_DRAWS} draws in a row found no room for two contours of "
                              f"{style.dashes} dashes at resolution {style.res}: raise the resolution (32 or more) "
                              "or draw fewer dashes")
        images[i] = img
    return images, labels


def write_pathfinder(out_dir: str | Path, n: int, seed: int = 0, res: int = 32,
                     level: str = "curv_contour_length_14", per_batch: int = 1000, **style) -> Path:
    """Write `n` images in LRA's layout under `out_dir/pathfinder{res}/{level}`; returns that folder."""
    st = PathfinderStyle(res=res, **style)
    check_int("pathfinder", "per_batch", per_batch)
    images, labels = generate_pathfinder(n, seed, st)
    root = Path(out_dir) / f"pathfinder{res}" / level
    (root / "metadata").mkdir(parents=True, exist_ok=True)
    for b, start in enumerate(range(0, n, per_batch)):
        (root / "imgs" / str(b)).mkdir(parents=True, exist_ok=True)
        rows = []
        for i in range(start, min(n, start + per_batch)):
            write_png(root / "imgs" / str(b) / f"sample_{i}.png", images[i])
            rows.append(f"imgs/{b} sample_{i}.png {i} {int(labels[i])}\n")
        (root / "metadata" / f"{b}.npy").write_text("".join(rows))
    return root

"""Evaluation maths, in numpy, each function testable on its own.

* `mode_metrics`: mixture-of-Gaussians coverage as in VEEGAN (Srivastava et al. 2017) and
  PacGAN (Lin et al. 2018).
* `hole_metrics`: L1, PSNR and SSIM inside the holes of completed images.
* `frechet_distance` (FID) and `kernel_inception_distance` (KID) between feature sets.
"""

import numpy as np

# Modes ----------------------------------------------------------------------------------------


def mode_metrics(points, centres, std):
    """Coverage of a 2-D Gaussian mixture by generated points.

    A point is high quality when it lies within 3 standard deviations of its nearest centre;
    a mode is captured when at least one high-quality point is assigned to it.

    Args:
        points: [N, 2] generated points.
        centres: [K, 2] mode centres.
        std: the modes' standard deviation.

    Returns:
        `{"modes": captured modes, "modes_total": K, "high_quality": share of high-quality
        points, "reverse_kl": KL(generated mode histogram || uniform)}`. The histogram counts
        the high-quality points per mode; with none, the reverse KL is None (undefined).
    """
    points = np.asarray(points, np.float64)
    centres = np.asarray(centres, np.float64)
    distances = np.linalg.norm(points[:, None, :] - centres[None, :, :], axis=-1)
    nearest = distances.argmin(axis=1)
    good = distances[np.arange(len(points)), nearest] <= 3.0 * std
    counts = np.bincount(nearest[good], minlength=len(centres))
    result = {
        "modes": int((counts > 0).sum()),
        "modes_total": int(len(centres)),
        "high_quality": float(good.mean()) if len(points) else 0.0,
        "reverse_kl": None,
    }
    if counts.sum():
        p = counts / counts.sum()
        q = 1.0 / len(centres)
        nonzero = p > 0
        result["reverse_kl"] = float(np.sum(p[nonzero] * np.log(p[nonzero] / q)))
    return result


# Holes ----------------------------------------------------------------------------------------

SSIM_SIZE, SSIM_SIGMA = 11, 1.5  # Wang et al. 2004, as in tf.image.ssim
SSIM_K1, SSIM_K2 = 0.01, 0.03


def hole_metrics(truth, completed, mask):
    """Errors inside the holes, on images in [0, 1].

    Args:
        truth, completed: [N, H, W, C] in [0, 1].
        mask: [N, H, W, 1] (or [N, H, W]), 1 inside the hole.

    Returns:
        `{"l1": mean |error| over hole elements, "psnr": mean over images of
        10 log10(1 / MSE over the image's hole) in dB, "ssim": mean over images of the SSIM
        map averaged over the hole}`. SSIM uses the 11x11 Gaussian window (sigma 1.5) of
        `tf.image.ssim`; a hole pixel within 5 pixels of the border counts through the nearest
        full window.
    """
    errors, weights, psnr, ssim = 0.0, 0.0, [], []
    # HOLE_CHUNK images at a time: the float64 maps below are 8 bytes per pixel each, and
    # memory stays bounded whatever the number of images.
    for start in range(0, len(truth), HOLE_CHUNK):
        part = slice(start, start + HOLE_CHUNK)
        sums = _hole_sums(truth[part], completed[part], mask[part])
        errors, weights = errors + sums[0], weights + sums[1]
        psnr.append(sums[2])
        ssim.append(sums[3])
    return {
        "l1": float(errors / weights),
        "psnr": float(np.concatenate(psnr).mean()),
        "ssim": float(np.concatenate(ssim).mean()),
    }


HOLE_CHUNK = 32


def _hole_sums(truth, completed, mask):
    """`hole_metrics` of some images: (sum of |error| over hole elements, their count,
    PSNR per image, SSIM per image)."""
    truth = np.asarray(truth, np.float64)
    completed = np.asarray(completed, np.float64)
    mask = np.asarray(mask, np.float64)
    if mask.ndim == 3:
        mask = mask[..., None]
    weight = np.broadcast_to(mask, truth.shape)
    error = completed - truth
    per_image = np.sum(error**2 * weight, axis=(1, 2, 3)) / np.maximum(
        np.sum(weight, axis=(1, 2, 3)), 1
    )
    psnr = 10.0 * np.log10(1.0 / np.maximum(per_image, 1e-10))
    ssim_map = ssim_maps(truth, completed)  # [N, H - 10, W - 10]
    window_weights = hole_window_weights(mask[..., 0], ssim_map.shape[1:])
    ssim = np.sum(ssim_map * window_weights, axis=(1, 2)) / np.maximum(
        np.sum(window_weights, axis=(1, 2)), 1e-12
    )
    return float(np.sum(np.abs(error) * weight)), float(np.sum(weight)), psnr, ssim


def gaussian_window(size=SSIM_SIZE, sigma=SSIM_SIGMA):
    coords = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(coords**2) / (2 * sigma**2))
    g /= g.sum()
    return np.outer(g, g)


def _filter_valid(images, window):
    """2-D 'valid' correlation of [N, H, W, C] images with a [k, k] window, per channel."""
    k = window.shape[0]
    n, h, w, c = images.shape
    out = np.zeros((n, h - k + 1, w - k + 1, c))
    for i in range(k):
        for j in range(k):
            out += window[i, j] * images[:, i : i + h - k + 1, j : j + w - k + 1]
    return out


def ssim_maps(a, b, max_value=1.0):
    """Per-window SSIM [N, H - 10, W - 10], averaged over channels (as `tf.image.ssim`)."""
    window = gaussian_window()
    c1, c2 = (SSIM_K1 * max_value) ** 2, (SSIM_K2 * max_value) ** 2
    mu_a, mu_b = _filter_valid(a, window), _filter_valid(b, window)
    aa = _filter_valid(a * a, window) - mu_a**2
    bb = _filter_valid(b * b, window) - mu_b**2
    ab = _filter_valid(a * b, window) - mu_a * mu_b
    luminance = (2 * mu_a * mu_b + c1) / (mu_a**2 + mu_b**2 + c1)
    structure = (2 * ab + c2) / (aa + bb + c2)
    return (luminance * structure).mean(axis=-1)


def hole_window_weights(mask, map_shape):
    """How many hole pixels each SSIM window stands for: a pixel counts for the window centred
    on it, or the nearest full window near the border."""
    n, h, w = mask.shape
    half = SSIM_SIZE // 2
    rows = np.clip(np.arange(h) - half, 0, map_shape[0] - 1)
    cols = np.clip(np.arange(w) - half, 0, map_shape[1] - 1)
    weights = np.zeros((n, *map_shape))
    np.add.at(weights, (slice(None), rows[:, None], cols[None, :]), mask)
    return weights


# FID and KID ----------------------------------------------------------------------------------


def frechet_distance(features_a, features_b):
    """FID between two feature sets [N, D]: |mu_a - mu_b|^2 + Tr(S_a + S_b - 2 (S_a S_b)^1/2).

    Tr((S_a S_b)^1/2) is the sum of the square roots of the eigenvalues of
    S_a^1/2 S_b S_a^1/2, which is symmetric positive semi-definite (numpy only, no scipy).
    """
    a = np.asarray(features_a, np.float64)
    b = np.asarray(features_b, np.float64)
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a = np.atleast_2d(np.cov(a, rowvar=False))
    cov_b = np.atleast_2d(np.cov(b, rowvar=False))
    values, vectors = np.linalg.eigh(cov_a)
    root_a = (vectors * np.sqrt(np.clip(values, 0, None))) @ vectors.T
    middle = root_a @ cov_b @ root_a
    eigen = np.linalg.eigvalsh((middle + middle.T) / 2)
    trace_root = np.sqrt(np.clip(eigen, 0, None)).sum()
    distance = np.sum((mu_a - mu_b) ** 2) + np.trace(cov_a) + np.trace(cov_b) - 2 * trace_root
    return float(max(distance, 0.0))


def polynomial_mmd(a, b):
    """The unbiased MMD^2 estimate with the kernel k(x, y) = (x.y / D + 1)^3."""
    d = a.shape[1]
    kaa = (a @ a.T / d + 1) ** 3
    kbb = (b @ b.T / d + 1) ** 3
    kab = (a @ b.T / d + 1) ** 3
    m, n = len(a), len(b)
    term_a = (kaa.sum() - np.trace(kaa)) / (m * (m - 1))
    term_b = (kbb.sum() - np.trace(kbb)) / (n * (n - 1))
    return float(term_a + term_b - 2 * kab.mean())


def kernel_inception_distance(features_a, features_b, subsets=100, subset_size=1000, seed=0):
    """KID (Binkowski et al. 2018): the mean unbiased polynomial-kernel MMD^2 over `subsets`
    random subsets (drawn without replacement, `seed`-determined) of min(`subset_size`, N / 2)
    points, N the smaller set's size. 100 subsets of 1,000 are the defaults of Binkowski et
    al.'s `compute_scores.py`, stylegan2-ada and clean-fid; the latter two take min(1,000, N),
    the same from N = 2,000 on. Below that, at most half of each set, so the subsets differ
    and their spread says something.

    Returns:
        `(mean, standard deviation)` over the subsets.
    """
    a = np.asarray(features_a, np.float64)
    b = np.asarray(features_b, np.float64)
    size = min(subset_size, len(a) // 2, len(b) // 2)
    if size < 2:
        raise ValueError("KID needs at least 4 samples per set")
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(subsets):
        ia = rng.choice(len(a), size, replace=False)
        ib = rng.choice(len(b), size, replace=False)
        values.append(polynomial_mmd(a[ia], b[ib]))
    return float(np.mean(values)), float(np.std(values))


# Local structure ------------------------------------------------------------------------------

SOBEL = np.array([[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]]) / 8.0
LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
STRUCTURE_FEATURES = ("gradient_mean", "gradient_p90", "laplacian_mean", "laplacian_p90")


def _filter3(grey, kernel):
    """A 3x3 correlation of [N, H, W] images, edges repeated ('same' size)."""
    padded = np.pad(grey, ((0, 0), (1, 1), (1, 1)), mode="edge")
    h, w = grey.shape[1:]
    out = np.zeros_like(grey)
    for dy in range(3):
        for dx in range(3):
            out += kernel[dy, dx] * padded[:, dy : dy + h, dx : dx + w]
    return out


def structure_maps(images):
    """Sobel gradient magnitude and |Laplacian| of the grey level of [N, H, W, C] images in
    [0, 1]: two [N, H, W] maps. Blur lowers both; noise and hard edges raise them."""
    grey = np.asarray(images, np.float64).mean(axis=-1)
    gx, gy = _filter3(grey, SOBEL), _filter3(grey, SOBEL.T)
    return np.hypot(gx, gy), np.abs(_filter3(grey, LAPLACIAN))


def structure_features(images, mask):
    """Per image, inside its hole grown by one pixel (the seam counts): the mean and 90th
    percentile of the gradient magnitude and of |Laplacian| (`STRUCTURE_FEATURES`), [N, 4].

    Args:
        images: [N, H, W, C] in [0, 1].
        mask: [N, H, W, 1], 1 in the hole.
    """
    gradient, laplacian = structure_maps(images)
    hole = np.asarray(mask, bool)[..., 0]
    grown = hole.copy()
    grown[:, 1:] |= hole[:, :-1]
    grown[:, :-1] |= hole[:, 1:]
    grown[:, :, 1:] |= hole[:, :, :-1]
    grown[:, :, :-1] |= hole[:, :, 1:]
    out = np.zeros((len(hole), 4))
    for i, region in enumerate(grown):
        if not region.any():
            continue
        g, lap = gradient[i][region], laplacian[i][region]
        out[i] = g.mean(), np.percentile(g, 90), lap.mean(), np.percentile(lap, 90)
    return out


def structure_metrics(truth, completed, mask):
    """How the local structure in the holes of completed images compares with the same
    images whole (all in [0, 1]): `structure`, the Fréchet distance between their
    `structure_features` (x 1000, so that typical values read as whole numbers; 0: the same
    statistics), and `sharpness`, the mean gradient magnitude in the holes relative to the
    truth's (1: as sharp; below 1: blurrier, above: noisier)."""
    real = structure_features(truth, mask)
    fake = structure_features(completed, mask)
    return {
        "structure": 1000.0 * frechet_distance(real, fake),
        "sharpness": float(fake[:, 0].mean() / max(real[:, 0].mean(), 1e-12)),
    }

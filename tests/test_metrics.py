"""Evaluation maths against hand-computed values and independent implementations."""

import math

import numpy as np
import pytest
import tensorflow as tf

from stagegan.evaluation import metrics


def test_mode_metrics_by_hand():
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    # Nearest modes: 0, 0, 1, 0 (5 from both 0 and 1: the first wins, but it is not within
    # 3 std of either, so it is not high quality). Mode 2 gets nothing.
    points = np.array([[0.5, 0.0], [0.0, 2.9], [10.0, 1.0], [5.0, 0.0]])
    result = metrics.mode_metrics(points, centres, std=1.0)
    assert result["modes"] == 2
    assert result["modes_total"] == 3
    assert result["high_quality"] == 0.75
    # Histogram of high-quality points: [2, 1, 0] / 3 against uniform 1/3.
    expected = 2 / 3 * math.log((2 / 3) / (1 / 3)) + 1 / 3 * math.log((1 / 3) / (1 / 3))
    assert result["reverse_kl"] == pytest.approx(expected, abs=1e-12)


def test_mode_metrics_uniform_coverage_has_zero_kl_and_none_without_quality():
    centres = np.array([[0.0, 0.0], [4.0, 0.0]])
    result = metrics.mode_metrics(centres.repeat(3, axis=0), centres, std=0.1)
    assert (result["modes"], result["high_quality"]) == (2, 1.0)
    assert result["reverse_kl"] == pytest.approx(0.0, abs=1e-12)
    far = metrics.mode_metrics(np.array([[2.0, 9.0]]), centres, std=0.1)
    assert (far["modes"], far["high_quality"], far["reverse_kl"]) == (0, 0.0, None)


def test_hole_l1_and_psnr_by_hand():
    truth = np.zeros((2, 12, 12, 1))
    completed = np.zeros((2, 12, 12, 1))
    mask = np.zeros((2, 12, 12, 1))
    mask[0, 2:4, 2:4] = 1  # 4 hole pixels, error 0.1 each
    completed[0, 2:4, 2:4] = 0.1
    mask[1, 5:6, 5:9] = 1  # 4 hole pixels, error 0.5 each
    completed[1, 5:6, 5:9] = 0.5
    completed[1, 0, 0] = 1.0  # outside the hole: ignored
    result = metrics.hole_metrics(truth, completed, mask)
    assert result["l1"] == pytest.approx((4 * 0.1 + 4 * 0.5) / 8)
    psnr = (10 * math.log10(1 / 0.01) + 10 * math.log10(1 / 0.25)) / 2  # 20 dB and 6.02 dB
    assert result["psnr"] == pytest.approx(psnr)


def test_hole_ssim_matches_tensorflow_when_the_hole_covers_every_window():
    rng = np.random.default_rng(0)
    a = rng.uniform(size=(3, 24, 24, 3))
    b = np.clip(a + rng.normal(0, 0.2, a.shape), 0, 1)
    mask = np.zeros((3, 24, 24, 1))
    mask[:, 5:19, 5:19] = 1  # exactly the centres of the 14 x 14 valid 11 x 11 windows
    ours = metrics.hole_metrics(a, b, mask)["ssim"]
    reference = float(tf.reduce_mean(tf.image.ssim(tf.constant(a), tf.constant(b), 1.0)))
    assert ours == pytest.approx(reference, abs=1e-6)
    assert metrics.hole_metrics(a, a, mask)["ssim"] == pytest.approx(1.0)


def test_hole_ssim_only_sees_the_hole():
    rng = np.random.default_rng(1)
    a = rng.uniform(size=(1, 32, 32, 1))
    b = a.copy()
    b[:, :, 20:] = rng.uniform(size=(1, 32, 12, 1))  # damage far from the hole only
    mask = np.zeros((1, 32, 32, 1))
    mask[:, 8:12, 4:8] = 1
    assert metrics.hole_metrics(a, b, mask)["ssim"] == pytest.approx(1.0)


def test_fid_is_zero_for_identical_sets_and_the_squared_shift_for_shifted_ones():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    assert metrics.frechet_distance(x, x) == pytest.approx(0.0, abs=1e-6)
    shift = np.array([1.0, -2.0, 0.0, 0.5, 0.0])
    # Same covariance, means apart by `shift`: FID = |shift|^2 = 5.25 exactly.
    assert metrics.frechet_distance(x, x + shift) == pytest.approx(5.25, abs=1e-6)


def test_fid_of_one_dimensional_gaussians_by_hand():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 1))
    y = 3.0 * x + 1.0
    m, s = x.mean(), x.std(ddof=1)
    # (mu_x - mu_y)^2 + (s_x - s_y)^2 for 1-D Gaussians; here mu_y = 3m + 1, s_y = 3s.
    expected = (m - (3 * m + 1)) ** 2 + (s - 3 * s) ** 2
    assert metrics.frechet_distance(x, y) == pytest.approx(expected, rel=1e-9)


def test_kid_matches_a_brute_force_double_loop():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(12, 3))
    b = rng.normal(0.5, 1.0, size=(10, 3))
    k = lambda u, v: (np.dot(u, v) / 3 + 1) ** 3
    size = 5  # one subset: 5 of a's 12 rows and 5 of b's 10 (at most half of each)
    mean, std = metrics.kernel_inception_distance(a, b, subsets=1, subset_size=50, seed=0)
    rng = np.random.default_rng(0)  # the same draws, in the same order
    x = a[rng.choice(len(a), size, replace=False)]
    y = b[rng.choice(len(b), size, replace=False)]
    pairs = [(i, j) for i in range(size) for j in range(size)]
    xx = sum(k(x[i], x[j]) for i, j in pairs if i != j) / (size * (size - 1))
    yy = sum(k(y[i], y[j]) for i, j in pairs if i != j) / (size * (size - 1))
    xy = sum(k(x[i], y[j]) for i, j in pairs) / size**2
    assert mean == pytest.approx(xx + yy - 2 * xy, rel=1e-9)
    assert std == 0.0


def test_kid_subsets_are_smaller_than_the_sets_so_they_differ_and_the_std_means_something():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(1000, 4)), rng.normal(0.2, 1.0, size=(1000, 4))
    # At the default subset size of 1000 and 1000 samples, every subset used to be the whole
    # set, and the std over subsets was exactly 0.
    mean, std = metrics.kernel_inception_distance(a, b, subsets=10, seed=1)
    assert std > 0
    rng = np.random.default_rng(1)
    draws = [
        (rng.choice(1000, 500, replace=False), rng.choice(1000, 500, replace=False))
        for _ in range(10)
    ]
    assert len({tuple(sorted(i)) for i, _ in draws}) == 10  # ten different real subsets
    values = [metrics.polynomial_mmd(a[i], b[j]) for i, j in draws]
    assert (mean, std) == pytest.approx((np.mean(values), np.std(values)), rel=1e-9)
    with pytest.raises(ValueError, match="at least 4"):
        metrics.kernel_inception_distance(a[:3], b[:3])


def test_kid_is_near_zero_for_one_distribution_and_large_for_shifted():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(500, 8)), rng.normal(size=(500, 8))
    same, _ = metrics.kernel_inception_distance(x, y, subsets=5, subset_size=200)
    shifted, _ = metrics.kernel_inception_distance(x, y + 2.0, subsets=5, subset_size=200)
    assert abs(same) < 0.05 < shifted


def test_structure_features_by_hand():
    # A vertical step edge from 0 to 1 between columns 3 and 4 of an 8x8 grey image.
    image = np.zeros((1, 8, 8, 1))
    image[..., 4:, 0] = 1.0
    mask = np.zeros((1, 8, 8, 1))
    mask[0, 2:5, 3:5] = 1.0  # a 3x2 hole on the edge; grown by a pixel: rows 1-5, cols 2-5
    gradient, laplacian = metrics.structure_maps(image)
    # Sobel / 8 across a unit step: (1 + 2 + 1) / 8 = 0.5 in the two columns beside it.
    np.testing.assert_allclose(gradient[0, 3, 2:6], [0.0, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(laplacian[0, 3, 2:6], [0.0, 1.0, 1.0, 0.0])
    features = metrics.structure_features(image, mask)
    # The grown hole: the 3x2 core (6 pixels), 2 above and 2 below it, 3 left and 3 right
    # of it: 16 pixels, of which 6 + 4 = 10 lie in columns 3-4 (gradient 0.5, |Laplacian|
    # 1.0) and 6 in columns 2 and 5 (0): means 5 / 16 and 10 / 16, 90th percentiles 0.5, 1.
    np.testing.assert_allclose(features, [[0.3125, 0.5, 0.625, 1.0]])


def test_structure_metrics_see_blur_and_not_a_copy():
    rng = np.random.default_rng(0)
    truth = (rng.uniform(size=(64, 16, 16, 1)) > 0.5).astype(float)
    mask = np.zeros((64, 16, 16, 1))
    mask[:, 4:12, 4:12] = 1.0
    blurred = truth.copy()
    blurred[:, 1:-1, 1:-1] = (
        sum(truth[:, 1 + dy : 15 + dy, 1 + dx : 15 + dx] for dy in (-1, 0, 1) for dx in (-1, 0, 1))
        / 9.0
    )
    same = metrics.structure_metrics(truth, truth, mask)
    blur = metrics.structure_metrics(truth, blurred, mask)
    assert same["structure"] == pytest.approx(0.0, abs=1e-6) and same["sharpness"] == 1.0
    assert blur["structure"] > 100 and blur["sharpness"] < 0.6

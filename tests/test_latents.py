"""Latent tools (`stagegan.core.latents`): the truncation trick and spherical walks, checked
against numbers worked out by hand."""

import numpy as np
import pytest

from stagegan.core import latents


def test_truncation_redraws_only_the_entries_beyond_the_threshold():
    z = np.array([[0.5, -2.0, 1.9], [-0.1, 3.0, -1.0]], np.float32)
    out = latents.truncate(z, 1.0, seed=3)
    assert out.dtype == np.float32 and out.shape == z.shape
    assert np.abs(out).max() <= 1.0
    inside = np.abs(z) <= 1.0
    np.testing.assert_array_equal(out[inside], z[inside])  # kept as they were, not rescaled
    assert not np.isin(out[~inside], [1.0, -1.0]).any()  # redrawn, not clipped to the bound
    np.testing.assert_array_equal(out, latents.truncate(z, 1.0, seed=3))  # fixed by the seed
    assert not np.array_equal(out, latents.truncate(z, 1.0, seed=4))
    np.testing.assert_array_equal(latents.truncate(z, 5.0, seed=3), z)  # nothing beyond 5


def test_truncated_latents_follow_the_truncated_normal():
    """Redrawn until inside: a normal truncated to [-T, T]. Its variance at T = 1 is
    1 - 2 phi(1) / (2 Phi(1) - 1) = 0.2911 (phi, Phi: the standard normal's density, CDF)."""
    z = np.random.default_rng(0).standard_normal((200, 500))
    out = latents.truncate(z, 1.0, seed=0)
    assert abs(out.mean()) < 0.01
    assert out.var() == pytest.approx(0.2911, abs=0.005)


def test_slerp_by_hand():
    a, b = np.array([1.0, 0.0]), np.array([0.0, 2.0])
    np.testing.assert_allclose(latents.slerp(a, b, 0.0), a)
    np.testing.assert_allclose(latents.slerp(a, b, 1.0), b, atol=1e-12)
    # Halfway: the direction at 45 degrees, the norm halfway from 1 to 2.
    np.testing.assert_allclose(latents.slerp(a, b, 0.5), 1.5 * np.array([1, 1]) / np.sqrt(2))
    # A third of the way: 30 degrees, norm 4/3.
    third = latents.slerp(a, b, 1 / 3)
    np.testing.assert_allclose(third, (4 / 3) * np.array([np.cos(np.pi / 6), np.sin(np.pi / 6)]))
    # Parallel vectors: the straight line.
    np.testing.assert_allclose(latents.slerp(a, 3 * a, 0.5), 2 * a)


def test_a_walk_passes_through_its_keyframes_evenly():
    keyframes = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    frames = latents.walk(keyframes, 5)  # positions 0, 0.5, 1, 1.5, 2
    assert frames.shape == (5, 2) and frames.dtype == np.float32
    np.testing.assert_allclose(frames[[0, 2, 4]], keyframes, atol=1e-6)
    s = np.sqrt(0.5)
    np.testing.assert_allclose(frames[[1, 3]], [[s, s], [-s, s]], atol=1e-6)

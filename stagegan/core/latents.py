"""Latent-space tools for a trained generator: truncation and walks (`stagegan sample
--truncation T --interpolate K`). Plain numpy on latents `z` [N, D]; TF-free.

    z = truncate(z, 0.7, seed=0)           # every entry within [-0.7, 0.7], redrawn, not clipped
    frames = walk(z[:3], 16)               # 16 latents on great circles through 3 keyframes
"""

import numpy as np

# The stream of the redrawn entries, apart from the one the latents were drawn from: the same
# seed gives the same truncated latents, whatever the threshold.
TRUNCATION_STREAM = 0x7472756E  # "trun"
MAX_REDRAWS = 10_000  # far more than any threshold above 0.01 needs (P(|z| <= 0.01) ~ 0.8%)


def truncate(z, threshold, seed):
    """The truncation trick as BigGAN (Brock et al. 2019) does it: each entry of `z` whose
    magnitude is above `threshold` is redrawn from N(0, 1) until it is not (a truncated normal,
    not a clipped one).

    Args:
        z: latents [N, D] drawn from N(0, 1).
        threshold: a positive number; the smaller, the more typical (and alike) the samples.
        seed: fixes the redraws.

    Returns:
        A float32 copy of `z`, entries within [-threshold, threshold] left as they were.
    """
    z = np.array(z, np.float32)
    rng = np.random.default_rng([seed, TRUNCATION_STREAM])
    outside = np.abs(z) > threshold
    for _ in range(MAX_REDRAWS):
        if not outside.any():
            return z
        z[outside] = rng.standard_normal(int(outside.sum())).astype(np.float32)
        outside = np.abs(z) > threshold
    z[outside] = np.clip(z[outside], -threshold, threshold)  # a threshold near 0: the rest
    return z


def slerp(a, b, t):
    """Spherical interpolation from `a` to `b` (vectors [D]) at `t` in [0, 1]: along the great
    circle between their directions, with the norm interpolated linearly, so every point
    keeps the norm a Gaussian latent typically has (a straight line passes close to 0).
    Parallel vectors fall back to the straight line."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    norm_a, norm_b = np.linalg.norm(a), np.linalg.norm(b)
    if norm_a == 0 or norm_b == 0:
        return (1 - t) * a + t * b
    cosine = np.clip(np.dot(a / norm_a, b / norm_b), -1.0, 1.0)
    omega = np.arccos(cosine)
    if np.sin(omega) < 1e-6:
        return (1 - t) * a + t * b
    direction = (np.sin((1 - t) * omega) * a / norm_a + np.sin(t * omega) * b / norm_b) / np.sin(
        omega
    )
    return direction * ((1 - t) * norm_a + t * norm_b)


def walk(keyframes, frames):
    """`frames` latents [frames, D] along the path through `keyframes` [K, D] (K >= 2), one
    spherical segment (`slerp`) after another, evenly spaced: the first frame is the first
    keyframe, the last the last."""
    keyframes = np.asarray(keyframes, np.float64)
    positions = np.linspace(0, len(keyframes) - 1, frames)
    out = []
    for position in positions:
        segment = min(int(position), len(keyframes) - 2)
        out.append(slerp(keyframes[segment], keyframes[segment + 1], position - segment))
    return np.asarray(out, np.float32)

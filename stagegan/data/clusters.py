"""Clusters of an unlabelled image folder, as its classes (`data.labels: clusters`).

A self-conditioned GAN (Liu et al. 2020, "Diverse Image Generation via Self-Conditioned
GANs"), with the clusters fixed once, from the pixels: each image is fitted as the run reads
it, area-averaged to 8x8 (grey, or RGB with `data.channels: 3`), and k-means (k-means++
seeding, the best of `RESTARTS` by the sum of squared distances) groups these 64 (or 192)
numbers into `data.clusters` groups, with a fixed seed. A run records its clusters in its
folder (`clusters.json`), and a resumed run, `sample` and `eval` reuse them. Clusters are named
`cluster00`, `cluster01`, ... from the largest to the smallest; a cluster left empty is
dropped.
"""

import numpy as np

THUMBNAIL = 8  # the side of the thumbnails that k-means groups
RESTARTS = 10
SEED = 0
DEFAULT_CLUSTERS = 20


def kmeans(points, k, seed=SEED, restarts=RESTARTS, iterations=100):
    """k-means with k-means++ seeding: `(labels [N], centres [k, D])` of the best of
    `restarts` runs by the sum of squared distances to the nearest centre."""
    points = np.asarray(points, np.float64)
    rng = np.random.default_rng(seed)
    best = None
    for _ in range(restarts):
        centres = plus_plus(points, k, rng)
        for _ in range(iterations):
            labels = nearest_centre(points, centres)
            moved = np.array(
                [
                    points[labels == j].mean(0) if np.any(labels == j) else centres[j]
                    for j in range(k)
                ]
            )
            if np.allclose(moved, centres):
                break
            centres = moved
        labels = nearest_centre(points, centres)
        inertia = np.sum((points - centres[labels]) ** 2)
        if best is None or inertia < best[0]:
            best = (inertia, labels, centres)
    return best[1], best[2]


def plus_plus(points, k, rng):
    """k-means++ seeding (Arthur & Vassilvitskii 2007): each next centre drawn with
    probability proportional to the squared distance to the nearest chosen one."""
    centres = [points[rng.integers(len(points))]]
    squared = ((points - centres[0]) ** 2).sum(1)  # to the nearest chosen centre
    for _ in range(1, k):
        total = squared.sum()
        if total == 0:  # fewer distinct points than clusters: repeat one
            centres.append(points[rng.integers(len(points))])
        else:
            centres.append(points[rng.choice(len(points), p=squared / total)])
        squared = np.minimum(squared, ((points - centres[-1]) ** 2).sum(1))
    return np.array(centres)


def nearest_centre(points, centres):
    squared = (points**2).sum(1)[:, None] - 2 * points @ centres.T + (centres**2).sum(1)[None]
    return np.argmin(squared, axis=1)


def by_size(labels):
    """`labels` renumbered from the largest cluster (0) to the smallest, empty ones dropped
    (ties: the lower old number first): int32 [N]."""
    counts = np.bincount(labels)
    used = np.flatnonzero(counts)
    order = used[np.lexsort((used, -counts[used]))]
    new = np.full(len(counts), -1, np.int64)
    new[order] = np.arange(len(order))
    return new[labels].astype(np.int32)


def names(count):
    """`cluster00`, `cluster01`, ...: zero-padded so that they sort in cluster order."""
    digits = max(2, len(str(count - 1)))
    return [f"cluster{j:0{digits}d}" for j in range(count)]


def thumbnails(images):
    """uint8 images [N, S, S, C] -> their `THUMBNAIL`-side area averages, flattened, in [0, 1]
    (float32 [N, 64 C]); S a multiple of 8 is averaged in exact blocks, else resized with
    an antialiased (area-like) filter."""
    n, side, _, channels = images.shape
    if n == 0:
        return np.zeros((0, THUMBNAIL * THUMBNAIL * channels), np.float32)
    images = np.asarray(images, np.float32) / 255.0
    if side % THUMBNAIL == 0:
        block = side // THUMBNAIL
        small = images.reshape(n, THUMBNAIL, block, THUMBNAIL, block, channels).mean((2, 4))
    else:
        import tensorflow as tf

        small = tf.image.resize(images, [THUMBNAIL, THUMBNAIL], antialias=True).numpy()
    return small.reshape(n, -1).astype(np.float32)

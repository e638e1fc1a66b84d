"""Realism numbers that need no download, each testable on its own.

* `precision_recall` (Kynkäänniemi et al. 2019) and `density_coverage` (Naeem et al. 2020):
  how much of the generated feature set lies where real features are (fidelity), and how much
  of the real set the generated one reaches (diversity), from k-nearest-neighbour balls.
* `sample_diversity`: how varied the samples are against the real images, as the ratio of
  their mean nearest-neighbour distances, per class for a conditional GAN: samples alike
  (one picture whatever the latent) show as a ratio near 0. Dropped modes whose samples still
  vary do not (that is recall's, coverage's and a mode count's to see).
* `c2st`: a classifier two-sample test (Lopez-Paz & Oquab 2017) on the images themselves.
* `selfsup_extractor`: features for any image data, from a small network trained on the
  run's own real images to predict their rotation (Gidaris et al. 2018).

The point-set maths is numpy; TensorFlow and Keras are imported inside the functions that
train networks.
"""

import numpy as np

# k-nearest-neighbour balls --------------------------------------------------------------------

CHUNK_ELEMENTS = 1 << 22  # float64 distances per block: 32 MB, whatever the set sizes


def precision_recall(real_features, fake_features, k=3):
    """Improved precision and recall (Kynkäänniemi et al. 2019).

    Each real point has a ball whose radius is the distance to its k-th nearest neighbour
    among the other real points; the real manifold is the union of these balls. Likewise for
    the fake points.

    Args:
        real_features: [N, D] features of real images.
        fake_features: [M, D] features of generated ones.
        k: the neighbour whose distance is a ball's radius; smaller than N and M.

    Returns:
        `{"precision": share of fake points inside at least one real ball, "recall": share
        of real points inside at least one fake ball}`. A point on a ball's surface is inside.

    Raises:
        ValueError: when `k` is not smaller than both set sizes.
    """
    real, fake = _points(real_features), _points(fake_features)
    _check_k(k, real, fake)
    real_radii, fake_radii = neighbour_radii(real, k), neighbour_radii(fake, k)
    in_real_ball = np.zeros(len(fake), bool)
    in_fake_ball = np.zeros(len(real), bool)
    for rows, block in squared_distance_blocks(fake, real):  # one pass serves both
        in_real_ball[rows] = np.any(block <= real_radii[None, :], axis=1)
        in_fake_ball |= np.any(block <= fake_radii[rows, None], axis=0)
    return {"precision": float(in_real_ball.mean()), "recall": float(in_fake_ball.mean())}


def density_coverage(real_features, fake_features, k=5):
    """Density and coverage (Naeem et al. 2020), on the real points' k-NN balls only (real
    data has fewer outliers than generated data, so its balls are the ones to trust).

    Args:
        real_features: [N, D] features of real images.
        fake_features: [M, D] features of generated ones.
        k: the neighbour whose distance is a real ball's radius; smaller than N.

    Returns:
        `{"density": (1 / (k M)) * sum over fake points of the number of real balls holding
        it (about 1 for matching distributions, above 1 where fakes crowd dense real regions),
        "coverage": share of real balls holding at least one fake point}`.

    Raises:
        ValueError: when `k` is not smaller than the number of real points.
    """
    real, fake = _points(real_features), _points(fake_features)
    _check_k(k, real)
    radii = neighbour_radii(real, k)
    inside = 0  # (fake, real ball) pairs
    covered = np.zeros(len(real), bool)
    for _, block in squared_distance_blocks(fake, real):
        within = block <= radii[None, :]
        inside += np.count_nonzero(within)
        covered |= np.any(within, axis=0)
    return {"density": float(inside / (k * len(fake))), "coverage": float(covered.mean())}


def neighbour_radii(points, k):
    """The squared distance [N] from each point to its k-th nearest other point."""
    radii = np.empty(len(points))
    for rows, block in squared_distance_blocks(points, points):
        block[np.arange(len(block)), rows] = np.inf  # a point is not its own neighbour
        radii[rows] = np.partition(block, k - 1, axis=1)[:, k - 1]
    return radii


def squared_distance_blocks(a, b):
    """Yields `(rows, block)`: the squared distances [len(rows), len(b)] from the rows of
    `a` to every point of `b`, a few rows at a time so memory stays bounded."""
    step = max(1, CHUNK_ELEMENTS // max(len(b), 1))
    b_norms = np.sum(b * b, axis=1)
    for start in range(0, len(a), step):
        part = a[start : start + step]
        block = np.sum(part * part, axis=1)[:, None] + b_norms[None, :] - 2.0 * part @ b.T
        yield np.arange(start, start + len(part)), np.maximum(block, 0.0)


def _points(features):
    points = np.asarray(features, np.float64)
    return points.reshape(len(points), -1)


def _check_k(k, *sets):
    smallest = min(len(s) for s in sets)
    if not 1 <= k < smallest:
        raise ValueError(
            f"`k` must be at least 1 and smaller than the number of points ({smallest}). "
            f"Received: k={k}"
        )


# Sample diversity ----------------------------------------------------------------------------

# Below this, a class's samples count as collapsed (one warning line names them). Measured
# on Stacked MNIST in selfsup features, 2,000 of each, 20 clusters (docs/config.md): two draws
# of real images 0.94-1.09 a cluster; real stacks of only 10, 3 or 1 of the 1,000 modes (every
# image a new one) 0.89-0.92; near-copies of 100 images 0.05; dcgan_clusters after 1,500 steps,
# one picture a cluster, 0.15-0.23 a cluster (0.16-0.44 with rpgan, R1, R2 and mbstd).
COLLAPSED = 0.5
# Points of each set (each class) the ratio is computed on: the first ones, as many of both,
# which is all the ratio needs; bounds the cost (all 10,000 of an unconditional evaluation
# in 2048-d Inception features: about 40 s a set on 2 CPU cores, 2,000: under 2 s).
DIVERSITY_POINTS = 2000


def nearest_distances(features):
    """The Euclidean distance [N] from each point of `features` [N, D] to its nearest other
    point."""
    return np.sqrt(neighbour_radii(_points(features), 1))


def diversity_ratio(real_features, fake_features, most=DIVERSITY_POINTS):
    """The generated points' mean distance to their nearest other generated point over the
    real points' mean distance to their nearest other real point: 1 as varied as the real
    set, 0 all alike. The distances shrink as a set grows, so both sets count the same
    number of points: the first min(len(real), len(fake), `most`) of each. None with fewer
    than 2 points in either set, or real points all equal."""
    count = min(len(real_features), len(fake_features), most)
    if count < 2:
        return None
    real_features, fake_features = real_features[:count], fake_features[:count]
    spread = float(nearest_distances(real_features).mean())
    if spread == 0.0:
        return None
    return float(nearest_distances(fake_features).mean()) / spread


def sample_diversity(real_features, fake_features, labels=None, classes=()):
    """`diversity_ratio` over all points, or per class.

    Args:
        real_features, fake_features: [N, D] each.
        labels: [N] class indices of both sets (a conditional GAN generates the real points'
            classes), or None: one set.
        classes: the class names, by index.

    Returns:
        `{"diversity", "diversity_worst"}` (both the ratio of the whole sets without labels);
        with labels also `"diversity/<class>"` (None for a class with fewer than 2 points),
        `"diversity"` their mean, `"diversity_worst"` the lowest and
        `"diversity_worst_class"` its class. A value is None when there is none.
    """
    if labels is None:
        ratio = diversity_ratio(real_features, fake_features)
        return {"diversity": ratio, "diversity_worst": ratio}
    labels = np.asarray(labels)
    per_class = {
        name: diversity_ratio(real_features[labels == i], fake_features[labels == i])
        for i, name in enumerate(classes)
    }
    known = {name: r for name, r in per_class.items() if r is not None}
    worst = min(known, key=known.get) if known else None
    return {
        "diversity": float(np.mean(list(known.values()))) if known else None,
        "diversity_worst": known.get(worst),
        "diversity_worst_class": worst,
        **{f"diversity/{name}": r for name, r in per_class.items()},
    }


def collapse_warning(result, threshold=COLLAPSED):
    """One line naming the classes of `sample_diversity`'s `result` whose ratio is below
    `threshold` (lowest first), or None when none is."""
    per_class = {k.split("/", 1)[1]: v for k, v in result.items() if k.startswith("diversity/")}
    if not per_class:  # one set: an unconditional run
        ratio = result["diversity"]
        if ratio is None or ratio >= threshold:
            return None
        return (
            f"eval: the samples have collapsed: their nearest-neighbour distance is {ratio:.2f} "
            f"of the real images' (diversity below {threshold:g})"
        )
    low = sorted((v, k) for k, v in per_class.items() if v is not None and v < threshold)
    if not low:
        return None
    (ratio, name), others = low[0], low[1:]
    line = (
        f"eval: class {name} has collapsed: its samples' nearest-neighbour distance is "
        f"{ratio:.2f} of its real images' (diversity/{name} below {threshold:g})"
    )
    if others:
        line += "; also " + ", ".join(f"{k} ({v:.2f})" for v, k in others)
    return line


# Classifier two-sample test -------------------------------------------------------------------

C2ST_BATCH = 64
C2ST_FILTERS = (16, 32, 32)
# The local variant: full resolution first, then max pooling, so one defect anywhere (a
# flat or blurred patch in a hole) decides, where average pooling dilutes it.
C2ST_LOCAL_FILTERS, C2ST_LOCAL_STRIDES = (32, 64, 64), (1, 2, 2)
# Steps per fold: enough for a few hundred images to teach something (blur is learnt in
# about 150), and a bound on the time for large sets (10,000 of each: 2 epochs).
C2ST_MIN_STEPS, C2ST_MAX_STEPS = 150, 400
PREDICT_BATCH = 256


def c2st(real_images, fake_images, seed=0, folds=3, epochs=6, local=False):
    """Classifier two-sample test (Lopez-Paz & Oquab 2017): how well a small CNN, trained to
    tell generated images (label 1) from real ones (label 0), does on images it never saw.

    About 0.5 when it cannot tell them apart, 1.0 when it always can. It detects whatever
    difference a small CNN learns in a few epochs: blur, checkerboard or colour artefacts,
    wrong stroke widths or textures, noise. It misses what no single image shows: mode
    dropping (generated images that are all real-looking but too few kinds) is mostly
    invisible to it, so it says nothing about diversity; read it beside recall or coverage.

    The sets are cut to the same size (the first min(N, M) of each); each of `folds` folds
    (as many real as fake images in each) is scored by a fresh network trained on the other
    folds for `epochs` epochs of batches of 64, but at least `C2ST_MIN_STEPS` (20 per batch
    of training images, when that is fewer: a handful of images needs no more) and at most
    `C2ST_MAX_STEPS` steps (about 10 s for 2,000 images of each at 32x32 on 2 CPU cores).

    Args:
        real_images, fake_images: [N, H, W, C] in [-1, 1], H and W at least 16.
        seed: fixes the initial weights and the folds and batches: the same images and seed
            give the same number.
        folds: the number of folds (at least 2).
        epochs: passes over the training folds, before the bounds on steps.
        local: a network that looks for a local defect (full-resolution first layer, max
            pooling): for images whose difference is confined to a region, such as the
            hole-centred crops of completed images, with the mask as a channel.

    Returns:
        `{"c2st": mean held-out accuracy over the folds, "c2st_std": its standard deviation
        over the folds}`.

    Raises:
        ValueError: with fewer than `folds` images of either kind, or `folds` below 2.
    """
    count = min(len(real_images), len(fake_images))
    if folds < 2 or count < folds:
        raise ValueError(
            f"`folds` must be at least 2 and at most the number of images of each kind "
            f"({count}). Received: folds={folds}"
        )
    sets = [np.asarray(images[:count], np.float32) for images in (real_images, fake_images)]
    labels = np.repeat(np.array([0.0, 1.0], np.float32), count)
    take = lambda indices: (_take(sets, indices), labels[indices])  # 0..count-1 real, then fake
    rng = np.random.default_rng(seed)
    # Real image i and fake image i are dealt into the same fold: every fold is balanced,
    # and when the sets are paired (a completion and the image it completes), no image's
    # content is learnt as "real" in training and met again as "fake" in testing (a
    # classifier that memorises content would then score below chance).
    fold_indices = [
        np.concatenate([part, count + part])
        for part in np.array_split(rng.permutation(count), folds)
    ]
    accuracies = []
    for fold, test in enumerate(fold_indices):
        train = np.concatenate([f for i, f in enumerate(fold_indices) if i != fold])
        batches = -(-len(train) // C2ST_BATCH)
        least = C2ST_MAX_STEPS if local else C2ST_MIN_STEPS  # a local defect takes longer
        steps = np.clip(epochs * batches, min(least, 20 * batches), C2ST_MAX_STEPS)
        fresh = _c2st_network(sets[0].shape[-1], rng, local)  # this fold's initial weights
        fit = _c2st_fit(sets[0].shape[-1], local, fresh)
        fit.restart(fresh.get_weights())
        model = fit.model
        fit(map(take, _batches(train, C2ST_BATCH, steps, rng)))
        logits = np.concatenate(
            [
                np.asarray(model(_take(sets, test[i : i + PREDICT_BATCH]), training=False))
                for i in range(0, len(test), PREDICT_BATCH)
            ]
        )
        accuracies.append(np.mean((logits[:, 0] > 0) == (labels[test] > 0.5)))
    return {"c2st": float(np.mean(accuracies)), "c2st_std": float(np.std(accuracies))}


# One c2st network and traced training step per (channels, local), kept for the process:
# every fold of every call restarts it from its own seeded weights. A step traced per call
# would cost about 0.4 s per evaluation and, in a long run, keep each evaluation's graph
# alive for good (Keras' optimizers go through `tf.custom_gradient`, whose global registry
# holds every traced graph: tensorflow/tensorflow#97697): 4 MB more per evaluation, measured.
_C2ST_FITS = {}


def _c2st_fit(channels, local, network):
    """The kept `Fit` for `(channels, local)`, made around `network` the first time."""
    key = (channels, local)
    if key not in _C2ST_FITS:
        _C2ST_FITS[key] = Fit(network, _binary_loss)
    return _C2ST_FITS[key]


def _take(sets, indices):
    """Images `indices` of the sets laid end to end (without copying them all)."""
    first = indices < len(sets[0])
    out = np.empty((len(indices), *sets[0].shape[1:]), np.float32)
    out[first] = sets[0][indices[first]]
    out[~first] = sets[1][indices[~first] - len(sets[0])]
    return out


def _c2st_network(channels, rng, local=False):
    """Three strided 3x3 convolutions (LeakyReLU), global average pooling, one logit; or,
    `local`, a full-resolution first convolution and global max pooling."""
    import keras

    layers = keras.layers
    x = keras.Input((None, None, channels))
    h = x
    filters, strides = (
        (C2ST_LOCAL_FILTERS, C2ST_LOCAL_STRIDES) if local else (C2ST_FILTERS, (2, 2, 2))
    )
    for width, stride in zip(filters, strides, strict=True):
        h = layers.Conv2D(width, 3, stride, padding="same", kernel_initializer=_init(rng))(h)
        h = layers.LeakyReLU(0.2)(h)
    pool = layers.GlobalMaxPooling2D() if local else layers.GlobalAveragePooling2D()
    h = pool(h)
    return keras.Model(x, layers.Dense(1, kernel_initializer=_init(rng))(h), name="c2st")


def _binary_loss(logits, labels):
    import tensorflow as tf

    return tf.reduce_mean(
        tf.nn.sigmoid_cross_entropy_with_logits(labels=labels[:, None], logits=logits)
    )


# Self-supervised features ---------------------------------------------------------------------

SELFSUP_SIDE = 32
SELFSUP_FEATURES = 128
SELFSUP_FILTERS = (16, 32, 64)
SELFSUP_BATCH = 32  # images per step; each is shown at all 4 rotations
SELFSUP_STEPS = 300


def selfsup_extractor(reference_images, seed=0, steps=SELFSUP_STEPS):
    """Features for any image data, with nothing to download: a small CNN trained on
    `reference_images` to predict by how many quarter turns (0, 90, 180, 270 degrees) each
    image was rotated (Gidaris et al. 2018). Telling which way is up takes knowing what the
    images show (where the sky is, which way strokes run), so its penultimate layer describes
    the content, and the Fréchet distance in it is a realism number like FID.

    The network depends on the reference images and the seed: compare numbers only with
    numbers computed with the same reference images and seed (as FID numbers are comparable
    only with the same Inception weights). Images rotated alike at every angle (isotropic
    noise, centred discs) teach it little.

    Args:
        reference_images: real images [N, S, S, C] in [-1, 1] (square: rotations must keep
            the shape). Images are resized to 32x32 (area averaging).
        seed: fixes the initial weights and the batches.
        steps: optimizer steps, each on `SELFSUP_BATCH` images at 4 rotations (at most 20
            per batch of reference images).

    Returns:
        A callable images [N, S, S, C] in [-1, 1] -> features [N, 128] (a tf.Tensor).
    """
    images = _resize(reference_images).numpy()
    steps = min(steps, 20 * -(-len(images) // SELFSUP_BATCH))  # a handful needs no more
    rng = np.random.default_rng(seed)
    model, features = _rotation_network(images.shape[-1], rng)
    batches = (
        _rotations(images[chosen])
        for chosen in _batches(np.arange(len(images)), SELFSUP_BATCH, steps, rng)
    )
    Fit(model, _rotation_loss)(batches)
    return lambda batch: features(_resize(batch), training=False)


def _rotations(images):
    """Each image at 0, 1, 2 and 3 quarter turns: images [4 B, S, S, C] and the number of
    turns [4 B]."""
    turned = [np.rot90(images, turns, axes=(1, 2)) for turns in range(4)]
    return np.concatenate(turned), np.repeat(np.arange(4, dtype=np.int32), len(images))


def _rotation_loss(logits, turns):
    import tensorflow as tf

    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=turns, logits=logits)
    )


def _rotation_network(channels, rng):
    """Images [32, 32, C] -> 4 rotation logits, and its feature model (the 128-d
    penultimate layer)."""
    import keras

    layers = keras.layers
    x = keras.Input((SELFSUP_SIDE, SELFSUP_SIDE, channels))
    h = x
    for filters in SELFSUP_FILTERS:  # 32 -> 16 -> 8 -> 4
        h = layers.Conv2D(filters, 3, 2, padding="same", kernel_initializer=_init(rng))(h)
        h = layers.LeakyReLU(0.2)(h)
    h = layers.Flatten()(h)  # keeps where things are: what tells up from down
    features = layers.Dense(SELFSUP_FEATURES, kernel_initializer=_init(rng))(h)
    features = layers.LeakyReLU(0.2, name="features")(features)
    logits = layers.Dense(4, kernel_initializer=_init(rng))(features)
    return keras.Model(x, logits, name="rotation_net"), keras.Model(x, features, name="selfsup")


def _resize(images):
    import tensorflow as tf

    images = tf.constant(np.asarray(images, np.float32))
    if images.shape[1] != SELFSUP_SIDE or images.shape[2] != SELFSUP_SIDE:
        images = tf.image.resize(images, [SELFSUP_SIDE, SELFSUP_SIDE], method="area")
    return images


# Shared: small seeded networks, trained with a plain loop -------------------------------------

LEARNING_RATE = 2e-3


def _init(rng):
    """A Glorot-uniform initializer seeded from `rng`: the weights follow from the seed."""
    import keras

    return keras.initializers.GlorotUniform(seed=int(rng.integers(2**31)))


def _batches(indices, size, steps, rng):
    """`steps` batches of `size` (at most len(indices)) of `indices`: whole shuffled epochs
    one after another, in an order fixed by `rng`."""
    size = min(size, len(indices))
    order = np.empty(0, indices.dtype)
    for _ in range(steps):
        if len(order) < size:
            order = np.concatenate([order, rng.permutation(indices)])
        yield order[:size]
        order = order[size:]


class Fit:
    """A plain training loop: one Adam step on `loss(model(x), y)` per `(x, y)` of the
    batches it is called with. The step is traced once: `restart` sets the network's weights
    and a fresh optimizer state, so the folds of a c2st train one traced network (a new
    trace costs about 0.4 s, more than a fold of a few hundred images)."""

    def __init__(self, model, loss):
        import keras
        import tensorflow as tf

        self.model = model
        optimizer = keras.optimizers.Adam(LEARNING_RATE)
        weights = model.trainable_variables
        optimizer.build(weights)
        self.optimizer, self.start = optimizer, [v.numpy() for v in optimizer.variables]

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                value = loss(model(x, training=True), y)
            optimizer.apply_gradients(zip(tape.gradient(value, weights), weights, strict=True))

        self.step = step

    def restart(self, weights):
        """The network at `weights` (as `get_weights` gives them), the optimizer as built."""
        self.model.set_weights(weights)
        for variable, value in zip(self.optimizer.variables, self.start, strict=True):
            variable.assign(value)

    def __call__(self, batches):
        for x, y in batches:
            self.step(x, y)

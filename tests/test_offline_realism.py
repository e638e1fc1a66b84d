"""Realism numbers that need no download (`stagegan.evaluation.realism`): precision, recall,
density and coverage on point sets worked out by hand; the classifier two-sample test on
images it can and cannot tell apart; the rotation network's features; and how `eval` wires
them in."""

import types

import numpy as np
import pytest
import tensorflow as tf

from stagegan.errors import ConfigError
from stagegan.evaluation import evaluate as evaluation
from stagegan.evaluation import features as extractors
from stagegan.evaluation import metrics, realism


def column(*values):
    """1-D points as a [N, 1] feature set."""
    return np.array(values, np.float64)[:, None]


# Precision and recall -------------------------------------------------------------------------


def test_fakes_collapsed_on_one_real_mode_have_full_precision_and_low_recall():
    # Three real modes of two points each; k = 1, so every real radius is 10 (the other point
    # of its mode). The fakes all sit on the first mode, 3 apart: every fake radius is 3.
    real = column(0, 10, 100, 110, 200, 210)
    fake = column(2, 5, 8, 11)
    # Precision: 2, 5, 8 are within 10 of real 0, and 11 within 10 of real 10: 4 of 4.
    # Recall: real 0 is 2 from fake 2 and real 10 is 1 from fake 11 (both <= 3); the other
    # four reals are at least 89 from every fake: 2 of 6.
    assert realism.precision_recall(real, fake, k=1) == {"precision": 1.0, "recall": 2 / 6}


def test_one_outlying_fake_ball_buys_full_recall_that_coverage_does_not_give():
    # k = 1. Real radii: 10 each (neighbours 10 apart). Fake radii: 15 -> 200 is 185;
    # 200, 300 and 400 each have a neighbour 100 away.
    real = column(0, 10, 20, 30)
    fake = column(15, 200, 300, 400)
    # Precision: only 15 lies in a real ball (5 from 10 and from 20): 1 of 4.
    # Recall: the ball of 15 (radius 185) holds every real point: 4 of 4.
    assert realism.precision_recall(real, fake, k=1) == {"precision": 0.25, "recall": 1.0}
    # Density: fake 15 is in the balls of reals 10 and 20 (0 and 30 are 15 > 10 away), the
    # others in none: (2 + 0 + 0 + 0) / (k M) = 2 / 4. Coverage: the balls of 10 and 20 hold
    # a fake, those of 0 and 30 do not: 2 of 4. The real balls do not reward the outlier.
    assert realism.density_coverage(real, fake, k=1) == {"density": 0.5, "coverage": 0.5}


def test_precision_recall_with_the_default_k_by_hand():
    # k = 3, the 3rd nearest other point. Reals 0..4: the others of 0 are 1, 2, 3, 4 away
    # -> 3; of 1: 1, 1, 2, 3 -> 2; of 2: 1, 1, 2, 2 -> 2; of 3: as 1 -> 2; of 4: as 0 -> 3.
    real = column(0, 1, 2, 3, 4)
    # Fakes: 6: 1, 2, 3, 44 -> 3; 7: 1, 1, 2, 43 -> 2; 8: 1, 1, 2, 42 -> 2; 9: 1, 2, 3, 41
    # -> 3; 50: 41, 42, 43, 44 -> 43.
    fake = column(6, 7, 8, 9, 50)
    # Precision: 6 is 2 from real 4 (radius 3): in; 7 is 3 from it: in (on the surface);
    # 8 is 4 from 4 and 5 from 3 (radius 2): out; 9 and 50: out. 2 of 5.
    # Recall: real 4 is 2 from fake 6 (radius 3) and real 3 is 3 from it: in; 0, 1 and 2
    # are at least 4 from 6, 5 from 7 and 8 (radius 2), 7 from 9 (radius 3) and 46 from 50
    # (radius 43): out. 2 of 5.
    assert realism.precision_recall(real, fake) == {"precision": 2 / 5, "recall": 2 / 5}


def test_two_dimensional_density_and_coverage_by_hand():
    # k = 2. The square (0,0), (2,0), (0,2), (2,2): each corner has two neighbours 2 away,
    # so its radius is 2 (squared 4). The pair (10,10), (10,12): (10,10)'s second neighbour
    # is (2,2), squared distance 64 + 64 = 128; (10,12)'s is (2,2), 64 + 100 = 164.
    real = np.array([[0, 0], [2, 0], [0, 2], [2, 2], [10, 10], [10, 12]], np.float64)
    fake = np.array([[1, 1], [0, -2], [18, 18], [30, 30]], np.float64)
    # Fake (1,1): squared 2 from each corner (inside 4 balls); 81 + 81 = 162 > 128 from
    # (10,10) and 81 + 121 = 202 > 164 from (10,12). Fake (0,-2): squared 4 from (0,0), on
    # its surface, inside; 8 from (2,0). Fake (18,18): 64 + 64 = 128 from (10,10), on its
    # surface, inside; 64 + 36 = 100 from (10,12), inside. Fake (30,30): in no ball.
    # Density: (4 + 1 + 2 + 0) / (k M) = 7 / 8. Coverage: the corners hold (1,1), the pair
    # holds (18,18): 6 of 6.
    result = realism.density_coverage(real, fake, k=2)
    assert result == pytest.approx({"density": 7 / 8, "coverage": 1.0}, abs=1e-12)
    # Without (18,18) the pair's balls are empty: 4 of 6.
    assert realism.density_coverage(real, fake[[0, 1, 3]], k=2)["coverage"] == 4 / 6


def naive_balls(real, fake, k):
    """Every distance at once, by a different route: (real radii, fake radii, distances)."""
    d_rr = np.linalg.norm(real[:, None] - real[None], axis=-1)
    d_ff = np.linalg.norm(fake[:, None] - fake[None], axis=-1)
    d_fr = np.linalg.norm(fake[:, None] - real[None], axis=-1)
    # Sorted, the 0 to itself comes first; the k-th other point is at index k.
    return np.sort(d_rr, axis=1)[:, k], np.sort(d_ff, axis=1)[:, k], d_fr


def test_small_blocks_give_what_a_full_distance_matrix_gives(monkeypatch):
    rng = np.random.default_rng(0)
    real, fake = rng.normal(size=(60, 3)), rng.normal(0.5, 1.2, size=(50, 3))
    monkeypatch.setattr(realism, "CHUNK_ELEMENTS", 7)  # one row at a time
    k = 4
    r_real, r_fake, d = naive_balls(real, fake, k)
    in_real = d <= r_real[None, :]  # [fake, real]
    assert realism.precision_recall(real, fake, k=k) == pytest.approx(
        {
            "precision": in_real.any(axis=1).mean(),
            "recall": (d <= r_fake[:, None]).any(axis=0).mean(),
        }
    )
    assert realism.density_coverage(real, fake, k=k) == pytest.approx(
        {"density": in_real.sum() / (k * len(fake)), "coverage": in_real.any(axis=0).mean()}
    )


def test_k_must_be_smaller_than_the_sets():
    with pytest.raises(ValueError, match=r"smaller than the number of points \(3\).*k=3"):
        realism.precision_recall(column(0, 1, 2, 3), column(0, 1, 2), k=3)
    with pytest.raises(ValueError, match="k=4"):
        realism.density_coverage(column(0, 1, 2, 3), column(0), k=4)


# Test images ----------------------------------------------------------------------------------


def blob_images(count, seed, side=32):
    """Grey images [N, S, S, 1] in [-1, 1]: light at the top, dark at the bottom, with one to
    three soft blobs and a sharp-edged bar (orientation and edges for the networks to see)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side] / (side - 1)
    images = np.empty((count, side, side, 1), np.float32)
    for n in range(count):
        image = 0.6 - 0.8 * y
        for _ in range(rng.integers(1, 4)):
            cy, cx = rng.uniform(0.2, 0.8, 2)
            spread = rng.uniform(0.05, 0.15)
            blob = np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * spread**2))
            image = image + rng.choice([-1.0, 1.0]) * blob
        top, left = rng.integers(0, side - 8, 2)
        image[top : top + 8, left : left + 3] = rng.choice([-1.0, 1.0])
        images[n, ..., 0] = np.clip(image, -1, 1)
    return images


def box_blur(images, radius=1):
    k = 2 * radius + 1
    kernel = np.ones((k, k, 1, 1), np.float32) / k**2
    return tf.nn.conv2d(images, kernel, 1, "SAME").numpy()


@pytest.fixture(scope="module")
def blobs():
    return blob_images(1000, seed=0)


# Classifier two-sample test -------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_blobs():
    """16x16 (the smallest size `c2st` takes): its networks train 4 times faster."""
    return blob_images(1000, seed=1, side=16)


def test_c2st_cannot_tell_two_halves_of_one_set_apart(small_blobs):
    result = realism.c2st(small_blobs[:500], small_blobs[500:], seed=0)
    # 1,000 held-out guesses: chance is 0.5 with a standard deviation of about 0.016.
    assert 0.4 < result["c2st"] < 0.6
    assert 0 <= result["c2st_std"] < 0.1


def test_c2st_tells_images_from_uniform_noise_and_from_blurred_images(small_blobs):
    real, other = small_blobs[:500], small_blobs[500:]
    noise = np.random.default_rng(1).uniform(-1, 1, other.shape).astype(np.float32)
    assert realism.c2st(real, noise, seed=0)["c2st"] > 0.95
    assert realism.c2st(real, box_blur(other), seed=0)["c2st"] > 0.9


def test_c2st_is_the_same_for_the_same_seed_and_uses_as_many_of_each(small_blobs):
    # 7 real against 400 fake: the first 7 of each (2 folds of 4 and 3 of each kind). The
    # same number twice also says that the seed fixes the weights and batches.
    result = realism.c2st(small_blobs[:7], small_blobs[100:500], seed=0, folds=2)
    assert result == realism.c2st(small_blobs[:7], small_blobs[100:107], seed=0, folds=2)
    with pytest.raises(ValueError, match="folds=3"):
        realism.c2st(small_blobs[:2], small_blobs[:5])


def test_c2st_folds_train_as_fresh_networks_would(small_blobs):
    """c2st trains one traced network, restarted per fold: each fold must score as a new
    network with a new Adam would, drawn from the same seeded stream (a plain loop here)."""
    import keras
    import tensorflow as tf

    real, fake = small_blobs[:30], box_blur(small_blobs[30:60])
    for local in (False, True):
        sets = [np.asarray(real, np.float32), np.asarray(fake, np.float32)]
        labels = np.repeat(np.array([0.0, 1.0], np.float32), 30)
        rng = np.random.default_rng(4)
        parts = np.array_split(rng.permutation(30), 3)
        folds = [np.concatenate([part, 30 + part]) for part in parts]
        accuracies = []
        for k, test in enumerate(folds):
            train = np.concatenate([f for i, f in enumerate(folds) if i != k])
            model = realism._c2st_network(sets[0].shape[-1], rng, local)
            optimizer = keras.optimizers.Adam(realism.LEARNING_RATE)
            optimizer.build(model.trainable_variables)

            @tf.function(autograph=False)  # this fold's network and Adam (eager: 4 times slower)
            def step(images, targets, model=model, optimizer=optimizer):
                with tf.GradientTape() as tape:
                    value = realism._binary_loss(model(images, training=True), targets)
                grads = tape.gradient(value, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

            for batch in realism._batches(train, realism.C2ST_BATCH, 20, rng):
                step(realism._take(sets, batch), labels[batch])
            logits = np.asarray(model(realism._take(sets, test), training=False))
            accuracies.append(np.mean((logits[:, 0] > 0) == (labels[test] > 0.5)))
        result = realism.c2st(real, fake, seed=4, local=local)
        assert result["c2st"] == pytest.approx(np.mean(accuracies), abs=1e-9), local
        assert result["c2st_std"] == pytest.approx(np.std(accuracies), abs=1e-9), local


def test_c2st_keeps_one_traced_step_for_every_call(small_blobs):
    """Each evaluation's c2st restarts the same network and traced step (a step traced per
    call would stay alive for good, 4 MB an evaluation: tensorflow/tensorflow#97697), and a
    call gives the same number whatever ran before it."""
    real, fake = small_blobs[:30], box_blur(small_blobs[30:60])
    first = realism.c2st(real, fake, seed=7)
    step = realism._C2ST_FITS[(real.shape[-1], False)].step
    traces = step.experimental_get_tracing_count()
    realism.c2st(fake, real, seed=8)
    assert realism.c2st(real, fake, seed=7) == first
    assert step.experimental_get_tracing_count() == traces


def flat_patches(images, seed):
    """`(marked real, marked fake)`: each image with a mask channel for a random 6x6 square,
    the fake with that square filled with the image's mean (a completion's flat fill)."""
    rng = np.random.default_rng(seed)
    count, side = len(images), images.shape[1]
    mask = np.zeros((count, side, side, 1), np.float32)
    for m, (top, left) in zip(mask, rng.integers(0, side - 6, (count, 2)), strict=True):
        m[top : top + 6, left : left + 6] = 1.0
    filled = images * (1 - mask) + images.mean(axis=(1, 2), keepdims=True) * mask
    marked = lambda x: np.concatenate([x, 2 * mask - 1], -1)
    return marked(images), marked(filled)


def test_local_c2st_finds_a_flat_fill_and_paired_sets_score_chance_not_below(small_blobs):
    """The completion test: a square of each image filled flat, the mask as a channel, the
    same images as the real set (pairs). The local network finds the fill; and identical
    pairs give chance, not less (real image i and fake image i share their fold: were they
    split, a classifier that learnt image i as real would call its copy real too)."""
    real, fake = flat_patches(small_blobs[:240], seed=0)
    assert realism.c2st(real, fake, seed=0, local=True)["c2st"] > 0.85
    same = realism.c2st(real, real.copy(), seed=0, local=True)["c2st"]
    assert 0.4 < same < 0.6


# Self-supervised features ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def selfsup(blobs):
    return realism.selfsup_extractor(blobs, seed=0)


def test_selfsup_features_follow_from_the_images_and_the_seed(blobs):
    some = blobs[:16]
    first, again = (realism.selfsup_extractor(blobs[:64], seed=3, steps=10) for _ in "ab")
    np.testing.assert_array_equal(np.asarray(first(some)), np.asarray(again(some)))
    assert np.asarray(first(some)).shape == (16, realism.SELFSUP_FEATURES)
    other = realism.selfsup_extractor(blobs[:64], seed=4, steps=10)
    assert not np.allclose(np.asarray(other(some)), np.asarray(first(some)))


def test_selfsup_frechet_distance_is_raised_by_blur(blobs, selfsup):
    a, b = blobs[:500], blobs[500:]
    features = lambda images: np.asarray(selfsup(images))
    fa = features(a)
    two_halves = metrics.frechet_distance(fa, features(b))
    blurred = [metrics.frechet_distance(fa, features(box_blur(b, r))) for r in (1, 2)]
    assert 3 * two_halves < blurred[0] < blurred[1]


# Wiring into `eval` ---------------------------------------------------------------------------


def test_distances_add_precision_recall_density_coverage_with_k_clamped():
    # 4 points per set: k is clamped to 3 for both pairs (5 would raise). Real radii (3rd
    # nearest other point): 0 -> 3, 1 -> 2, 2 -> 2, 3 -> 3. The fakes are the reals moved by
    # 10: 7 or more from every real point, outside every ball both ways.
    stub = types.SimpleNamespace(seed=0)
    real, fake = column(0, 1, 2, 3), column(10, 11, 12, 13)
    result = evaluation.Evaluation.distances(stub, real, fake)
    assert {"fid", "kid", "kid_std"} <= set(result)
    assert {k: result[k] for k in ("precision", "recall", "density", "coverage")} == {
        "precision": 0.0,
        "recall": 0.0,
        "density": 0.0,
        "coverage": 0.0,
    }
    same = evaluation.Evaluation.distances(stub, real, real)
    assert (same["precision"], same["recall"], same["coverage"]) == (1.0, 1.0, 1.0)
    # Density, k = 3: point 0 is in ball 0, ball 1 (1 <= 2), ball 2 (2 <= 2) and ball 3
    # (3 <= 3); so is every point by symmetry: 4 each, 16 / (k M) = 16 / 12.
    assert same["density"] == pytest.approx(16 / 12)


class ImageTaskStub:
    """Just what `Evaluation` asks of an image task to load features."""

    name = "stub"
    data = {"source": "folder"}
    capabilities = frozenset({"images"})
    metrics = ("realism",)

    def __init__(self, images):
        self.images = images
        self.asked = []

    @property
    def real(self):
        return self

    def draw(self, count, seed, key="count"):
        self.asked.append((count, seed, key))
        return self.images[:count], True


def test_offline_inception_falls_back_to_selfsup_on_the_real_images(blobs, monkeypatch, caplog):
    def offline(path, key):
        raise ConfigError(key, "no InceptionV3 weights")

    trained_on = []
    train = realism.selfsup_extractor

    def quick_selfsup(images, seed):
        trained_on.append((images, seed))
        return train(images, seed, steps=5)

    monkeypatch.setattr(extractors, "_inception", offline)
    monkeypatch.setattr(realism, "selfsup_extractor", quick_selfsup)
    monkeypatch.setattr(evaluation.log, "propagate", True)  # the CLI may have turned it off
    task = ImageTaskStub(blobs)
    trainer = types.SimpleNamespace(task=task, ema=None, added_metrics=())
    run = evaluation.Evaluation(trainer, None, count=40, seed=7, batch_size=16)
    assert run.features_spec == "inception"
    features = run.features(blobs[:20])
    assert features.shape == (20, realism.SELFSUP_FEATURES)
    assert run.features_spec == "selfsup"
    assert run.features_name == "selfsup (rotation net on this run's reference images)"
    assert "'selfsup' numbers" in caplog.text and "offline" in caplog.text
    assert task.asked == [(40, 7, "--count")]  # the real images `fid_kid` compares with
    np.testing.assert_array_equal(trained_on[0][0], blobs[:40])
    assert trained_on[0][1] == 7
    # Named features are not replaced: the error stands.
    named = evaluation.Evaluation(trainer, None, count=40, features="inception", batch_size=16)
    with pytest.raises(ConfigError, match="no InceptionV3 weights"):
        named.features(blobs[:4])


def test_selfsup_needs_a_task_with_real_images():
    task = types.SimpleNamespace(
        name="points", data={"source": "mog"}, capabilities=frozenset(), metrics=("mixture",)
    )
    trainer = types.SimpleNamespace(task=task, ema=None, added_metrics=())
    run = evaluation.Evaluation(trainer, None, count=40, features="selfsup", batch_size=16)
    with pytest.raises(ConfigError, match="--features.*task 'points' has none"):
        run.features(np.zeros((4, 16, 16, 1), np.float32))

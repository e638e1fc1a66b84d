"""The realism metric: the shapes classifier behind it (its labels, its accuracy on shapes it
never saw), and the Fréchet distance in its features (0 for identical sets, raised by blur)."""

import numpy as np
import pytest
import tensorflow as tf

from stagegan.data.sources import draw_shapes
from stagegan.evaluation import metrics, shapes_net


@pytest.fixture(scope="module")
def network():
    return shapes_net.load()


@pytest.fixture(scope="module")
def held_out():
    """Fresh shapes (a seed the classifier was not trained on), in [-1, 1]."""
    return draw_shapes(2000, 32, seed=99).astype(np.float32) / 127.5 - 1.0


def test_labels_change_no_image_and_agree_with_each_other():
    plain = draw_shapes(300, 32, seed=4)
    images, labels = draw_shapes(300, 32, seed=4, labels=True)
    np.testing.assert_array_equal(plain, images)
    empty = labels["shapes"] == 0
    assert empty.any() and (~empty).any()
    assert (labels["kind"][empty] == 3).all() and (labels["colour"][empty] == 8).all()
    assert (labels["kind"][~empty] < 3).all() and (labels["colour"][~empty] < 8).all()
    # The background bit of a channel is whether that channel's base value is above 0.5: a
    # corner pixel far from every shape shows base + gradient, close to the base.
    assert set(np.unique(labels["background"])) == set(range(8))


def test_the_classifier_beats_guessing_by_far_on_shapes_it_never_saw(network):
    model, _ = network
    accuracy = shapes_net.accuracy(model, count=2000, seed=shapes_net.HELD_OUT_SEED)
    _, labels = draw_shapes(2000, 32, shapes_net.HELD_OUT_SEED, labels=True)
    majority = {k: np.bincount(v).max() / len(v) for k, v in labels.items()}
    floors = {"kind": 0.65, "colour": 0.55, "background": 0.85, "shapes": 0.75}
    for head, floor in floors.items():
        assert accuracy[head] >= floor, (head, accuracy[head])
        assert accuracy[head] > majority[head] + 0.2, (head, majority[head])


def features(images):
    return np.asarray(shapes_net.extractor()(images))


def box_blur(images, radius):
    k = 2 * radius + 1
    kernel = np.ones((k, k, 1, 1), np.float32) / k**2
    channels = [tf.nn.conv2d(images[..., c : c + 1], kernel, 1, "SAME") for c in range(3)]
    return tf.concat(channels, -1).numpy()


def test_identical_sets_give_zero_and_blur_raises_the_distance(held_out):
    a, b = held_out[:1000], held_out[1000:]
    fa = features(a)
    assert metrics.frechet_distance(fa, fa) == pytest.approx(0.0, abs=1e-6)
    two_real = metrics.frechet_distance(fa, features(b))
    blurred = [metrics.frechet_distance(fa, features(box_blur(a, r))) for r in (1, 2)]
    assert two_real < blurred[0] < blurred[1]
    assert blurred[0] > 3 * two_real


def test_grey_and_larger_images_are_accepted(held_out):
    grey = held_out[:8].mean(axis=-1, keepdims=True)
    assert features(grey).shape == (8, shapes_net.FEATURES)
    large = np.repeat(np.repeat(held_out[:8], 2, axis=1), 2, axis=2)  # 64x64, same content
    np.testing.assert_allclose(features(large), features(held_out[:8]), atol=1e-4)

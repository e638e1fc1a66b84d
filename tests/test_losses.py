"""Every loss against numbers computed by hand (math module, not TensorFlow)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan.core import losses
from stagegan.errors import ConfigError

REAL = tf.constant([[2.0], [-1.0]])
FAKE = tf.constant([[0.5], [-3.0]])
sp = lambda v: math.log1p(math.exp(v))  # softplus


@pytest.mark.parametrize(
    "name, d_expected, g_expected",
    [
        ("non_saturating", (sp(-2) + sp(1)) / 2 + (sp(0.5) + sp(-3)) / 2, (sp(-0.5) + sp(3)) / 2),
        ("minimax", (sp(-2) + sp(1)) / 2 + (sp(0.5) + sp(-3)) / 2, -(sp(0.5) + sp(-3)) / 2),
        ("hinge", (0 + 2) / 2 + (1.5 + 0) / 2, -(0.5 - 3) / 2),
        ("wasserstein", (0.5 - 3) / 2 - (2 - 1) / 2, -(0.5 - 3) / 2),
        ("least_squares", 0.5 * ((1 + 4) / 2 + (0.25 + 9) / 2), 0.5 * (0.25 + 16) / 2),
    ],
)
def test_adversarial_pairs(name, d_expected, g_expected):
    d_loss, g_loss = losses.adversarial(name)
    assert float(d_loss(REAL, FAKE)) == pytest.approx(d_expected, rel=1e-6)
    assert float(g_loss(FAKE)) == pytest.approx(g_expected, rel=1e-6)


def test_unknown_adversarial_loss_names_the_key():
    with pytest.raises(ConfigError) as info:
        losses.adversarial("relativistic")
    assert info.value.key == "loss.adversarial" and "non_saturating" in info.value.message


def test_masked_reconstruction():
    target = tf.zeros([1, 2, 2, 1])
    output = tf.constant([[[[1.0], [-2.0]], [[3.0], [10.0]]]])
    mask = tf.constant([[[[1.0], [1.0]], [[0.0], [0.0]]]])  # only the top row counts
    assert float(losses.masked_l1(target, output, mask)) == pytest.approx((1 + 2) / 2)
    assert float(losses.masked_l2(target, output, mask)) == pytest.approx((1 + 4) / 2)
    # A one-channel mask broadcasts over colour channels.
    rgb = tf.ones([1, 2, 2, 3])
    assert float(losses.masked_l1(tf.zeros_like(rgb), rgb, mask)) == pytest.approx(1.0)


def test_masked_reconstruction_summed_per_example():
    # Two examples: the first has errors 1 and -2 in its hole, the second 3 in a one-pixel hole.
    target = tf.zeros([2, 2, 2, 1])
    output = tf.constant([[[[1.0], [-2.0]], [[5.0], [5.0]]], [[[3.0], [7.0]], [[7.0], [7.0]]]])
    mask = tf.constant([[[[1.0], [1.0]], [[0.0], [0.0]]], [[[1.0], [0.0]], [[0.0], [0.0]]]])
    assert float(losses.masked_l1(target, output, mask, "sum")) == pytest.approx((3 + 3) / 2)
    assert float(losses.masked_l2(target, output, mask, "sum")) == pytest.approx((5 + 9) / 2)
    # Over three colour channels a one-channel mask counts every channel.
    rgb = tf.ones([1, 2, 2, 3])
    assert float(losses.masked_l2(tf.zeros_like(rgb), rgb, mask[:1], "sum")) == pytest.approx(6)


def linear_critic(weights):
    """D(x) = sum(w * x): its input gradient is w everywhere."""
    w = tf.constant(weights)
    return lambda x: tf.reduce_sum(x * w, axis=list(range(1, len(x.shape))))


def test_gradient_penalty_of_a_linear_critic():
    # ||dD/dx|| = ||w|| = 5 for every interpolate, so the penalty is (5 - 1)^2 = 16.
    critic = linear_critic([3.0, 4.0])
    real, fake = tf.random.normal([4, 2]), tf.random.normal([4, 2])
    value = losses.gradient_penalty(critic, real, fake, tf.constant([0.0, 0.3, 0.7, 1.0]))
    assert float(value) == pytest.approx(16.0, rel=1e-5)


def test_gradient_penalty_uses_the_interpolates():
    # D(x) = sum(x^2)/2 has gradient x; with epsilon 0.5 the interpolate of 2 and 4 is 3.
    critic = lambda x: 0.5 * tf.reduce_sum(tf.square(x), axis=1)
    value = losses.gradient_penalty(
        critic, tf.constant([[2.0]]), tf.constant([[4.0]]), tf.constant([0.5])
    )
    assert float(value) == pytest.approx((3.0 - 1.0) ** 2, rel=1e-5)


def test_r1_penalty():
    critic = linear_critic([1.0, 2.0])  # ||w||^2 = 5
    assert float(losses.r1_penalty(critic, tf.ones([3, 2]))) == pytest.approx(5.0)


def test_penalties_are_differentiable_with_respect_to_the_critic():
    dense = keras.layers.Dense(1, kernel_initializer="ones")
    real = tf.ones([2, 3])
    with tf.GradientTape() as tape:
        penalty = losses.r1_penalty(dense, real)
    grad = tape.gradient(penalty, dense.kernel)
    # R1 = ||k||^2, so dR1/dk = 2k = 2.
    np.testing.assert_allclose(grad.numpy(), 2 * np.ones([3, 1]), rtol=1e-6)

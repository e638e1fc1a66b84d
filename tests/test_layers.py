"""Packing and spectral normalisation (`stagegan.core.layers`), against numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan.core.layers import SpectralConv2D, SpectralDense, one_pass, pack


def test_pack_points_concatenates_consecutive_samples():
    points = np.arange(12, dtype=np.float32).reshape(6, 2)
    packed = pack(tf.constant(points), 3).numpy()
    expected = np.stack([np.concatenate(points[g * 3 : g * 3 + 3]) for g in range(2)])
    np.testing.assert_array_equal(packed, expected)
    assert packed.shape == (2, 6)


def test_pack_images_stacks_samples_along_channels():
    images = np.random.default_rng(0).normal(size=(6, 4, 5, 3)).astype(np.float32)
    packed = pack(tf.constant(images), 2).numpy()
    assert packed.shape == (3, 4, 5, 6)
    for g in range(3):
        for j in range(2):  # sample g*2 + j sits in channels j*3 .. j*3+2 of pack g
            np.testing.assert_array_equal(packed[g, ..., j * 3 : j * 3 + 3], images[g * 2 + j])


def test_pack_of_one_is_the_identity():
    images = tf.random.normal([4, 3, 3, 1])
    assert pack(images, 1) is images


def _largest_singular_value(kernel):
    matrix = kernel.reshape(-1, kernel.shape[-1])
    return np.linalg.svd(matrix, compute_uv=False)[0]


@pytest.mark.parametrize("kind", ["dense", "conv"])
def test_spectral_norm_divides_by_the_largest_singular_value(kind):
    keras.utils.set_random_seed(1)
    if kind == "dense":
        layer, x = SpectralDense(5), tf.random.normal([3, 7])
    else:
        layer, x = SpectralConv2D(4, 3, strides=2), tf.random.normal([2, 6, 6, 3])
    layer(x)  # build
    kernel = layer.kernel.numpy().copy()
    for _ in range(50):  # the power iteration converges over updates
        layer(x, training=True)
        layer.advance_power_iteration()
    sigma = _largest_singular_value(kernel)
    np.testing.assert_array_equal(layer.kernel.numpy(), kernel)  # never written
    normalised = layer.normalised_kernel().numpy()
    np.testing.assert_allclose(normalised, kernel / sigma, rtol=1e-4)
    np.testing.assert_allclose(_largest_singular_value(normalised), 1.0, rtol=1e-4)
    # The output is the plain layer's with the normalised kernel.
    if kind == "dense":
        expected = x.numpy() @ (kernel / sigma) + layer.bias.numpy()
    else:
        expected = tf.nn.conv2d(x, kernel / sigma, 2, "SAME").numpy() + layer.bias.numpy()
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_spectral_norm_calls_write_nothing():
    """Forward passes, training or not, leave u alone: it moves only when the trainer
    advances it after an update of the layer."""
    keras.utils.set_random_seed(2)
    layer = SpectralDense(3)
    x = tf.random.normal([4, 6])
    layer(x)
    u = layer.u.numpy().copy()
    first = layer(x, training=True).numpy()
    np.testing.assert_array_equal(layer(x, training=True).numpy(), first)  # same sigma
    np.testing.assert_array_equal(layer(x, training=False).numpy(), first)
    np.testing.assert_array_equal(layer.u.numpy(), u)
    layer.advance_power_iteration()
    w = layer.kernel.numpy().astype(np.float64)
    v = w @ u
    expected = w.T @ (v / np.linalg.norm(v))
    np.testing.assert_allclose(layer.u.numpy(), expected / np.linalg.norm(expected), rtol=1e-5)
    assert not layer.u.trainable
    assert [v.path for v in layer.trainable_variables] == [layer.kernel.path, layer.bias.path]


def test_spectral_norm_gradient_flows_through_sigma():
    """d(output)/d(kernel) includes the path through sigma, with u and v held constant (as in
    Miyato et al.): compared with central finite differences in float64."""
    keras.utils.set_random_seed(3)
    layer = SpectralDense(2)
    x = tf.random.normal([5, 3])
    layer(x)
    kernel = layer.kernel.numpy().astype(np.float64)
    u = layer.u.numpy().astype(np.float64)
    v = kernel @ u
    v /= np.linalg.norm(v)  # the power iteration of the training call below
    u1 = kernel.T @ v
    u1 /= np.linalg.norm(u1)
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(layer(x, training=True))
    grad = tape.gradient(out, layer.kernel).numpy()

    def total(w):
        return np.sum(x.numpy().astype(np.float64) @ (w / (v @ w @ u1)))

    numeric = np.zeros_like(kernel)
    for index in np.ndindex(kernel.shape):
        step = np.zeros_like(kernel)
        step[index] = 1e-6
        numeric[index] = (total(kernel + step) - total(kernel - step)) / 2e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-3, atol=1e-4)


def test_one_pass_builds_each_normalised_kernel_once_with_the_same_values_and_gradients():
    """Inside `one_pass` (a replica's forward pass) a traced discriminator called three times,
    once under an inner tape for an R1-style input gradient, builds its normalised kernel
    once, and the loss and its gradient (second order included) are those of the same
    function built without the pass, where every call builds its own."""
    keras.utils.set_random_seed(4)
    layers = [SpectralDense(4, activation="tanh"), SpectralDense(1)]
    d = lambda x: layers[1](layers[0](x))
    real, fake = tf.random.normal([6, 3]), tf.random.normal([6, 3])
    d(real)
    variables = [layer.kernel for layer in layers]

    def loss():
        with tf.GradientTape() as inner:
            inner.watch(real)
            score = tf.reduce_sum(d(real))
        penalty = tf.reduce_sum(tf.square(inner.gradient(score, real)))
        return tf.reduce_mean(tf.nn.softplus(-d(real))) + tf.reduce_mean(d(fake)) + penalty

    def step(in_pass):
        with tf.GradientTape() as tape:
            if in_pass:
                with one_pass():
                    value = loss()
            else:
                value = loss()
        return value, tape.gradient(value, variables)

    results = {}
    for in_pass in (False, True):
        function = tf.function(lambda p=in_pass: step(p), autograph=False)
        graph = function.get_concrete_function().graph
        kinds = [op.type for op in graph.get_operations()]
        value, grads = function()
        results[in_pass] = kinds.count("RealDiv"), value.numpy(), [g.numpy() for g in grads]
    divisions, value, grads = results[True]
    uncached_divisions, uncached_value, uncached_grads = results[False]
    assert divisions < uncached_divisions  # W / sigma: once a layer, not once a call
    np.testing.assert_allclose(value, uncached_value, rtol=1e-6)
    # The loss by hand in float64: each kernel over its one-iteration sigma, the input
    # gradient of the tanh layer's sum written out.
    kernels = []
    for layer in layers:
        w, u = layer.kernel.numpy().astype(np.float64), layer.u.numpy().astype(np.float64)
        v = w @ u
        v /= np.linalg.norm(v)
        u1 = w.T @ v
        u1 /= np.linalg.norm(u1)
        kernels.append(w / (v @ w @ u1))
    (w0, w1), (b0, b1) = kernels, (layers[0].bias.numpy(), layers[1].bias.numpy())
    r, f = real.numpy().astype(np.float64), fake.numpy().astype(np.float64)
    d_np = lambda x: np.tanh(x @ w0 + b0) @ w1 + b1
    input_grads = ((1 - np.tanh(r @ w0 + b0) ** 2) * w1[:, 0]) @ w0.T
    by_hand = np.mean(np.logaddexp(0, -d_np(r))) + np.mean(d_np(f)) + np.sum(input_grads**2)
    np.testing.assert_allclose(value, by_hand, rtol=1e-5)
    for g, want in zip(grads, uncached_grads, strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)

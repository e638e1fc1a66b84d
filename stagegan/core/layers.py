"""Building blocks of the built-in discriminators: spectral normalisation, packing and the
minibatch standard deviation.

Spectral normalisation (Miyato et al. 2018) divides a layer's kernel by an estimate of its
largest singular value in the forward pass. Keras's own `SpectralNormalization` wrapper is not
used: in every training call it assigns the normalised kernel into the wrapped layer's
*trainable* kernel, so a generator update that runs the discriminator would rewrite the
discriminator's weights, and each tower would see a different kernel.

Here the forward pass writes nothing. It runs one power iteration from the stored vector `u`
(non-trainable, checkpointed) and divides by the resulting estimate of sigma, with `u` and `v`
held constant for the gradient, as in the paper. `u` itself advances by one power iteration on
the new kernel after each applied update that trains the layer (`advance_power_iterations`,
called by the stage step). So every discriminator call of a step, on every tower and backend,
uses the same estimate, and an update that does not train the discriminator (the generator's)
leaves all of its state alone. Within one replica's forward pass (`one_pass`: the kernel and `u`
cannot change during it) a layer builds its normalised kernel once, however often the
discriminator is called (real and generated batches, R1's input gradients): the same values, a
smaller graph to trace.

Packing (PacGAN, Lin et al. 2018) shows the discriminator `m` samples at once, all real or all
generated: consecutive samples of a batch are concatenated along the feature axis (the last
axis), so a batch of B samples becomes B / m packed samples.

The minibatch standard deviation (PGGAN, Karras et al. 2018) gives the discriminator one more
feature map: each group of consecutive inputs' mean standard deviation, so a batch of alike
samples (a collapsed generator) shows as such.
"""

import contextlib
import threading

import keras
import tensorflow as tf

# Each thread's normalised kernels of the forward pass it is in (`one_pass`); strategies run
# their replicas' passes in threads of their own.
_PASS = threading.local()


@contextlib.contextmanager
def one_pass():
    """A forward pass in which no variable changes: every spectrally normalised layer builds
    its normalised kernel once and reuses it (per graph: a tensor of a `tf.cond` branch or a
    nested function is not reused outside it)."""
    outer = getattr(_PASS, "kernels", None)
    _PASS.kernels = {}
    try:
        yield
    finally:
        _PASS.kernels = outer


def pack(samples, m):
    """Group consecutive samples into packs of `m`, concatenated along the last axis.

    `[B, d]` becomes `[B/m, m*d]`; `[B, H, W, C]` becomes `[B/m, H, W, m*C]`, with sample
    `g*m + j` in channels `j*C:(j+1)*C` of pack `g`. `B` must be divisible by `m` (the trainer
    checks each tower's shard before the first step).
    """
    if m == 1:
        return samples
    shape = samples.shape
    grouped = tf.reshape(samples, [-1, m, *shape[1:]])
    if len(shape) > 2:  # move the pack axis next to the channels
        rank = len(shape) + 1
        grouped = tf.transpose(grouped, [0, *range(2, rank - 1), 1, rank - 1])
    return tf.reshape(grouped, [-1, *shape[1:-1], m * shape[-1]])


def unpack(packs, m):
    """The inverse of `pack`: `[B/m, H, W, m*C]` back to `[B, H, W, C]` (or `[B/m, m*d]` to
    `[B, d]`), in the original sample order."""
    if m == 1:
        return packs
    shape = packs.shape
    channels = shape[-1] // m
    split = tf.reshape(packs, [-1, *shape[1:-1], m, channels])
    if len(shape) > 2:  # the pack axis back next to the batch axis
        rank = len(shape) + 1
        split = tf.transpose(split, [0, rank - 2, *range(1, rank - 2), rank - 1])
    return tf.reshape(split, [-1, *shape[1:-1], channels])


def minibatch_stddev(x, group):
    """The reference's minibatch standard deviation over groups of `group` consecutive
    images: one more feature map, each group's mean standard deviation."""
    n, h, w, c = tf.shape(x)[0], x.shape[1], x.shape[2], x.shape[3]
    size = tf.minimum(group, n)
    y = tf.reshape(x, [-1, size, h, w, c])
    y = y - tf.reduce_mean(y, axis=1, keepdims=True)
    y = tf.sqrt(tf.reduce_mean(tf.square(y), axis=1) + 1e-8)  # [groups, h, w, c]
    y = tf.reduce_mean(y, axis=[1, 2, 3])  # [groups]
    y = tf.repeat(y, size)[:, None, None, None] * tf.ones([1, h, w, 1], x.dtype)
    return tf.concat([x, tf.cast(y, x.dtype)], axis=-1)


class MinibatchStddev(keras.layers.Layer):
    """`minibatch_stddev` as a layer of a functional network: [N, H, W, C] -> [N, H, W, C + 1]
    over groups of `group` consecutive inputs (all of them when fewer)."""

    def __init__(self, group=4, **kwargs):
        super().__init__(**kwargs)
        self.group = group

    def call(self, x):
        return minibatch_stddev(x, self.group)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], input_shape[-1] + 1)

    def get_config(self):
        return {**super().get_config(), "group": self.group}


def _power_iteration(kernel, u):
    """One power iteration on `kernel` viewed as an [inputs, outputs] matrix W: returns
    `(v, u')` with v = W u / |W u| and u' = W^T v / |W^T v|."""
    w = tf.reshape(tf.cast(kernel, tf.float32), [-1, kernel.shape[-1]])
    v = tf.math.l2_normalize(tf.linalg.matvec(w, u))
    return w, v, tf.math.l2_normalize(tf.linalg.matvec(w, v, transpose_a=True))


class _SpectralLayer(keras.layers.Layer):
    """Shared parts: the kernel, bias and power-iteration vector `u`, and the normalised
    kernel in the compute dtype."""

    def __init__(
        self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform", **kwargs
    ):
        super().__init__(**kwargs)
        self.units = units
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _add_weights(self, kernel_shape):
        self.kernel = self.add_weight(
            name="kernel", shape=kernel_shape, initializer=self.kernel_initializer
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
        self.u = self.add_weight(
            name="u",
            shape=(self.units,),
            initializer=keras.initializers.RandomNormal(),
            trainable=False,
        )

    def normalised_kernel(self):
        """W / sigma, sigma = v^T W u' from one power iteration off the stored `u` (u and v
        are constants for the gradient). Writes nothing. Built once per `one_pass`."""
        kernels = getattr(_PASS, "kernels", None)
        if kernels is None or tf.executing_eagerly():
            return self._normalised_kernel()
        graph = tf.compat.v1.get_default_graph()
        cached = kernels.get(id(self))
        if cached is None or cached.graph is not graph:
            cached = kernels[id(self)] = self._normalised_kernel()
        return cached

    def _normalised_kernel(self):
        w, v, u = _power_iteration(self.kernel.value, tf.convert_to_tensor(self.u))
        v, u = tf.stop_gradient(v), tf.stop_gradient(u)
        sigma = tf.tensordot(v, tf.linalg.matvec(w, u), 1)
        return tf.cast(self.kernel.value / sigma, self.compute_dtype)

    def advance_power_iteration(self):
        """Move `u` one power iteration on, on the current kernel (after an update)."""
        _, _, u = _power_iteration(self.kernel.value, tf.convert_to_tensor(self.u))
        self.u.assign(u)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }

    def _add_bias(self, out):
        if self.bias is None:
            return self.activation(out)
        return self.activation(out + tf.cast(self.bias.value, self.compute_dtype))


class SpectralDense(_SpectralLayer):
    """`Dense` with a spectrally normalised kernel."""

    def build(self, input_shape):
        self._add_weights((input_shape[-1], self.units))

    def call(self, inputs):
        kernel = self.normalised_kernel()
        return self._add_bias(tf.matmul(inputs, kernel))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)


class SpectralConv2D(_SpectralLayer):
    """`Conv2D` (square kernel, "same" padding) with a spectrally normalised kernel."""

    def __init__(self, filters, kernel_size, strides=1, activation=None, **kwargs):
        super().__init__(filters, activation, **kwargs)
        self.kernel_size = kernel_size
        self.strides = strides

    def build(self, input_shape):
        k = self.kernel_size
        self._add_weights((k, k, input_shape[-1], self.units))

    def call(self, inputs):
        kernel = self.normalised_kernel()
        return self._add_bias(tf.nn.conv2d(inputs, kernel, self.strides, "SAME"))

    def compute_output_shape(self, input_shape):
        n, h, w = input_shape[:3]
        s = self.strides
        side = lambda x: None if x is None else -(-x // s)
        return (n, side(h), side(w), self.units)

    def get_config(self):
        config = super().get_config()
        config.pop("units")
        return {
            **config,
            "filters": self.units,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
        }


def power_iteration_hook(networks, variables):
    """The state update to run after applying an update that trains `variables`: one power
    iteration for every spectrally normalised layer whose kernel is among them, or None."""
    ids = {id(v) for v in variables}
    layers = [
        layer
        for network in networks
        for layer in network._flatten_layers()
        if isinstance(layer, _SpectralLayer) and id(layer.kernel) in ids
    ]
    if not layers:
        return None

    def advance():
        for layer in layers:
            layer.advance_power_iteration()

    return advance


def dense(units, name, spectral_norm=False, activation=None, initializer="glorot_uniform"):
    """A `Dense` layer, spectrally normalised on request."""
    kind = SpectralDense if spectral_norm else keras.layers.Dense
    return kind(units, activation=activation, kernel_initializer=initializer, name=name)


def conv2d(
    filters, kernel_size, strides, name, spectral_norm=False, use_bias=True,
    initializer="glorot_uniform",
):  # fmt: skip
    """A "same"-padded `Conv2D`, spectrally normalised on request."""
    options = dict(strides=strides, use_bias=use_bias, kernel_initializer=initializer, name=name)
    if spectral_norm:
        return SpectralConv2D(filters, kernel_size, **options)
    return keras.layers.Conv2D(filters, kernel_size, padding="same", **options)

"""The loss library: each loss is a small function of tensors, returning a scalar mean.

Discriminator outputs are logits (unbounded reals). Adversarial losses come in pairs,
`(d_loss(real_logits, fake_logits), g_loss(fake_logits))`, and are picked by name:

    name             d_loss                                   g_loss
    non_saturating   softplus(-D(x)) + softplus(D(G(z)))      softplus(-D(G(z)))
    minimax          softplus(-D(x)) + softplus(D(G(z)))      -softplus(D(G(z)))
    hinge            relu(1 - D(x)) + relu(1 + D(G(z)))       -D(G(z))
    wasserstein      D(G(z)) - D(x)                           -D(G(z))
    least_squares    ((D(x) - 1)^2 + D(G(z))^2) / 2           (D(G(z)) - 1)^2 / 2
    rpgan            softplus(D(G(z)) - D(x))                 softplus(D(x) - D(G(z)))

(softplus(-l) = -log sigmoid(l), so the first is the usual cross-entropy GAN loss.)

`rpgan` is relativistic pairing (Jolicoeur-Martineau 2019; R3GAN, Huang et al. 2024): the i-th
real output is compared with the i-th generated one, so its generator loss takes the real
outputs too, `g_loss(fake_logits, real_logits)` (`relativistic(name)` says so), and only
differences of outputs matter: its discriminator accuracy is the share of pairs it orders
rightly (`discriminator_accuracy`).
"""

import tensorflow as tf

from stagegan.errors import ConfigError


def _mean(x):
    return tf.reduce_mean(tf.cast(x, tf.float32))


def non_saturating_d(real, fake):
    return _mean(tf.nn.softplus(-real)) + _mean(tf.nn.softplus(fake))


def non_saturating_g(fake):
    return _mean(tf.nn.softplus(-fake))


def minimax_g(fake):
    # minimises log(1 - sigmoid(D(G(z)))) = -softplus(D(G(z)))
    return -_mean(tf.nn.softplus(fake))


def hinge_d(real, fake):
    return _mean(tf.nn.relu(1.0 - real)) + _mean(tf.nn.relu(1.0 + fake))


def wasserstein_d(real, fake):
    return _mean(fake) - _mean(real)


def negated_g(fake):
    return -_mean(fake)


def least_squares_d(real, fake):
    return 0.5 * (_mean(tf.square(real - 1.0)) + _mean(tf.square(fake)))


def least_squares_g(fake):
    return 0.5 * _mean(tf.square(fake - 1.0))


def rpgan_d(real, fake):
    """mean softplus(D(G(z_i)) - D(x_i)) over pairs: `real` and `fake` of the same shape (R3GAN's
    `AccumulateDiscriminatorGradients`)."""
    return _mean(tf.nn.softplus(tf.cast(fake, tf.float32) - tf.cast(real, tf.float32)))


def rpgan_g(fake, real=None):
    """mean softplus(D(x_i) - D(G(z_i))) over pairs (R3GAN's `AccumulateGeneratorGradients`)."""
    if real is None:
        raise ValueError("rpgan's generator loss compares with real outputs: g_loss(fake, real)")
    return _mean(tf.nn.softplus(tf.cast(real, tf.float32) - tf.cast(fake, tf.float32)))


ADVERSARIAL = {
    "non_saturating": (non_saturating_d, non_saturating_g),
    "minimax": (non_saturating_d, minimax_g),
    "hinge": (hinge_d, negated_g),
    "wasserstein": (wasserstein_d, negated_g),
    "least_squares": (least_squares_d, least_squares_g),
    "rpgan": (rpgan_d, rpgan_g),
}
RELATIVISTIC = frozenset({"rpgan"})  # g_loss(fake, real): the generator's loss needs D(x)


def relativistic(name):
    """Whether adversarial loss `name` pairs real and generated outputs (its `g_loss` takes
    the real outputs too)."""
    return name in RELATIVISTIC


# The discriminator output at which it calls a sample real: logits (and critics) by sign;
# least squares regresses fakes to 0 and reals to 1.
DECISION = {"least_squares": 0.5}
ACCURACY_TERMS = ("d_real_accuracy", "d_fake_accuracy")


def discriminator_accuracy(real, fake, threshold=0.0, paired=False):
    """`{d_real_accuracy, d_fake_accuracy}`: the shares of real samples (packs) that the
    discriminator calls real (output above `threshold`) and of generated ones it calls fake.
    `paired` (a relativistic loss, whose outputs have no fixed level): both are the share of
    pairs whose real output is above the generated one (ADA's r_t then reads as 2 x that - 1)."""
    real, fake = tf.cast(real, tf.float32), tf.cast(fake, tf.float32)
    if paired:
        ordered = _mean(real > fake)
        return {"d_real_accuracy": ordered, "d_fake_accuracy": ordered}
    return {
        "d_real_accuracy": _mean(real > threshold),
        "d_fake_accuracy": _mean(fake <= threshold),
    }


class AccuracyMonitor:
    """A task's `d_accuracy(real_logits, fake_logits, terms)` for adversarial loss `name`:
    the requested accuracy terms (see `discriminator_accuracy`)."""

    def __init__(self, name):
        self.threshold = DECISION.get(name, 0.0)
        self.paired = relativistic(name)

    def __call__(self, real, fake, terms, target=None, share=None):
        if not set(ACCURACY_TERMS) & set(terms):
            return {}
        if target is None:
            values = discriminator_accuracy(real, fake, self.threshold, self.paired)
        else:
            values = targeted_accuracy(real, fake, target, self.threshold, share)
        return {k: v for k, v in values.items() if k in terms}


# Per output: (real_term, fake_term, generator_term), each a function of logits to a tensor
# of the same shape. The losses above are their means: d_loss = mean(real_term(D(x))) +
# mean(fake_term(D(G(z)))), g_loss = mean(generator_term(D(G(z)))).
ELEMENTS = {
    "non_saturating": (
        lambda o: tf.nn.softplus(-o),
        tf.nn.softplus,
        lambda o: tf.nn.softplus(-o),
    ),
    "minimax": (lambda o: tf.nn.softplus(-o), tf.nn.softplus, lambda o: -tf.nn.softplus(o)),
    "hinge": (lambda o: tf.nn.relu(1.0 - o), lambda o: tf.nn.relu(1.0 + o), lambda o: -o),
    "wasserstein": (lambda o: -o, lambda o: o, lambda o: -o),
    "least_squares": (
        lambda o: 0.5 * tf.square(o - 1.0),
        lambda o: 0.5 * tf.square(o),
        lambda o: 0.5 * tf.square(o - 1.0),
    ),
}


def targeted(name, key="loss.adversarial"):
    """The `(d_loss(real, fake, target), g_loss(fake, target))` pair of adversarial loss
    `name` for a discriminator whose generated outputs are fake only in part: `target` (the
    shape of `fake`, in [0, 1]) is how fake each output is (LaMa's `mask_as_fake_target`,
    Suvorov et al. 2022: the share of the hole in the output's cell).

        d_loss = mean(real_term(D(x))) + mean(t * fake_term(D(y)) + (1 - t) * real_term(D(y)))
        g_loss = mean(t * generator_term(D(y))) / share

    t = 1 everywhere gives the plain pair's values. The generator's term is the mean over the
    fake part only (outputs with t = 0 are the known pixels, which the generator did not
    make): `share` is the mean of t, by default this shard's; a task with several replicas
    passes the global batch's (so that 1 and N replicas agree). It is 0 when nothing is fake.
    """
    adversarial(name, key)  # the refusal of an unknown name
    if relativistic(name):
        raise ConfigError(key, f"{name} pairs whole outputs; it has no per-output target")
    real_term, fake_term, generator_term = ELEMENTS[name]

    def d_loss(real, fake, target):
        real, fake = tf.cast(real, tf.float32), tf.cast(fake, tf.float32)
        t = tf.cast(target, tf.float32)
        mixed = t * fake_term(fake) + (1.0 - t) * real_term(fake)
        return _mean(real_term(real)) + _mean(mixed)

    def g_loss(fake, target, share=None):
        fake, t = tf.cast(fake, tf.float32), tf.cast(target, tf.float32)
        share = tf.reduce_mean(t) if share is None else tf.cast(share, tf.float32)
        return _mean(t * generator_term(fake)) / tf.maximum(share, 1e-8)

    return d_loss, g_loss


def targeted_accuracy(real, fake, target, threshold=0.0, share=None):
    """`discriminator_accuracy` with a fake target (see `targeted`, and its `share`): reals
    called real over all outputs; fakes called fake weighted by `target` (the share of the
    fake part the discriminator finds)."""
    real, fake = tf.cast(real, tf.float32), tf.cast(fake, tf.float32)
    t = tf.cast(target, tf.float32)
    share = tf.reduce_mean(t) if share is None else tf.cast(share, tf.float32)
    return {
        "d_real_accuracy": _mean(real > threshold),
        "d_fake_accuracy": _mean(t * tf.cast(fake <= threshold, tf.float32))
        / tf.maximum(share, 1e-8),
    }


def adversarial(name, key="loss.adversarial"):
    """The `(d_loss, g_loss)` pair called `name`."""
    if name not in ADVERSARIAL:
        raise ConfigError(
            key, f"unknown adversarial loss {name!r} (known: {', '.join(ADVERSARIAL)})"
        )
    return ADVERSARIAL[name]


# Penalties -----------------------------------------------------------------------------------


def _input_gradients(discriminator, inputs):
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        logits = discriminator(inputs)
    grads = tape.gradient(logits, inputs)
    return tf.reshape(grads, [tf.shape(grads)[0], -1])


def gradient_penalty(discriminator, real, fake, epsilon):
    """WGAN-GP (Gulrajani et al. 2017): mean over x^ of (||dD(x^)/dx^||_2 - 1)^2.

    Args:
        discriminator: `inputs -> logits`.
        real, fake: batches of the same shape.
        epsilon: interpolation weights, shape [batch] (drawn with the global batch's random
            inputs, so the penalty does not depend on the number of towers).
    """
    shape = [-1] + [1] * (len(real.shape) - 1)
    epsilon = tf.reshape(tf.cast(epsilon, real.dtype), shape)
    mixed = real + epsilon * (tf.stop_gradient(fake) - real)
    grads = _input_gradients(discriminator, mixed)
    norms = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1) + 1e-12)
    return _mean(tf.square(norms - 1.0))


def r1_penalty(discriminator, real):
    """R1 (Mescheder et al. 2018): mean over real x of ||dD(x)/dx||^2. Weight it by gamma / 2."""
    grads = _input_gradients(discriminator, real)
    return _mean(tf.reduce_sum(tf.square(grads), axis=1))


def r2_penalty(discriminator, fake):
    """R2 (Mescheder et al. 2018; R3GAN's pair with R1): mean over generated x of
    ||dD(x)/dx||^2, the samples held constant. Weight it by gamma / 2."""
    return r1_penalty(discriminator, tf.stop_gradient(fake))


# The generator's own terms -------------------------------------------------------------------


def mode_seeking(images, latents, epsilon=1e-5):
    """MSGAN's mode-seeking term (Mao et al. 2019), for samples generated in consecutive pairs
    (2k, 2k + 1) of the same class: 1 / (ratio + epsilon), ratio = mean|G(z1) - G(z2)| /
    mean|z1 - z2| over the pairs, the means over every element (MSGAN's `loss_lz`, epsilon
    1e-5 as there). Minimising it pushes pairs of latents apart in image space.

    Args:
        images: [2N, ...] generated samples, pair k in rows 2k and 2k + 1.
        latents: [2N, D] the latents they came from.
    """
    apart, between = _pair_distances(images, latents)  # every pair has as many elements
    return 1.0 / (_mean(apart) / _mean(between) + epsilon)


def mode_seeking_pairs(images, latents, epsilon=1e-5):
    """MSGAN's term taken pair by pair: the mean over pairs k of 1 / (ratio_k + epsilon),
    ratio_k = mean|G(z1) - G(z2)| / mean|z1 - z2| within pair k.

    `mode_seeking` divides the batch's mean distances, so a collapsed class (its pairs close
    together) gets no more push than any other, and only a weight strong enough to stir every
    class reaches it. Here each pair's gradient grows as 1 / ratio_k^2: the pairs of a collapsed
    class are pushed apart hardest and the varied ones hardly at all, at a weight that leaves a
    folder that does not collapse alone.

    Args:
        images: [2N, ...] generated samples, pair k in rows 2k and 2k + 1.
        latents: [2N, D] the latents they came from.
    """
    apart, between = _pair_distances(images, latents)
    return _mean(1.0 / (apart / between + epsilon))


def _pair_distances(images, latents):
    """`(apart, between)` [N]: each pair's mean |G(z1) - G(z2)| and mean |z1 - z2|, pair k in
    rows 2k and 2k + 1."""
    images, latents = tf.cast(images, tf.float32), tf.cast(latents, tf.float32)
    pairs = tf.shape(images)[0] // 2

    def per_pair(x):
        return tf.reduce_mean(tf.reshape(tf.abs(x[0::2] - x[1::2]), [pairs, -1]), 1)

    return per_pair(images), per_pair(latents)


# Reconstruction ------------------------------------------------------------------------------


REDUCTIONS = ("mean", "sum")


def _masked(values, mask, reduction):
    mask = tf.cast(tf.broadcast_to(mask, tf.shape(values)), values.dtype)
    if reduction == "sum":
        # Per example, the sum over masked elements (a squared norm for L2); then the batch mean.
        return tf.reduce_mean(tf.reduce_sum(values * mask, axis=tf.range(1, tf.rank(values))))
    return tf.reduce_sum(values * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def _difference(target, output):
    return tf.cast(output, tf.float32) - tf.cast(target, tf.float32)


def masked_l1(target, output, mask, reduction="mean"):
    """Absolute error over the elements where `mask` is 1 (broadcast over channels).

    reduction "mean": the mean over masked elements. "sum": each example's sum over its masked
    elements, averaged over the batch.
    """
    return _masked(tf.abs(_difference(target, output)), mask, reduction)


def masked_l2(target, output, mask, reduction="mean"):
    """Squared error over the elements where `mask` is 1, reduced as in `masked_l1`.

    With reduction "sum" this is GLCIC's ||M * (C(x, M) - x)||^2 per image, the loss the
    paper's alpha = 0.0004 is weighed against.
    """
    return _masked(tf.square(_difference(target, output)), mask, reduction)

"""Discriminator regularisers with state or random numbers: LeCam and balanced consistency.

Both are loss terms of the adversarial tasks, weighted in an update's `loss:` like any other:

    loss: {d_loss: 1, lecam: 0.3}                   # LeCam (unconditional, completion, mog2d)
    loss: {d_loss: 1, bcr: 10}                      # bCR (unconditional, completion)
    loss: {d_loss: 1, bcr_real: 10, bcr_fake: 5}    # bCR's two halves, weighted apart

**LeCam** (Tseng et al. 2021, "Regularizing GANs under limited data"):

    lecam = mean_x relu(D(x) - a_fake)^2 + mean_z relu(a_real - D(G(z)))^2

where a_real and a_fake are exponential moving averages of the discriminator's mean output on
real and generated samples, with decay `loss.lecam_decay` (0.99). They are variables on the
variable device, updated inside the compiled step after each applied update that trains on
`lecam`, from that update's means over the whole global batch (the replicas' means, averaged
as every loss term is), and checkpointed: 1 tower, N towers and a strategy keep the same
averages, and a resumed run goes on with them exactly. An update's penalty uses the averages
of the updates before it. (StudioGAN first folds the current batch in, with weight
1 - decay = 0.01, which would need the whole batch's mean before the loss: one more
all-reduce per step.) Until the first update and for the first `loss.lecam_start` of them
the averages take each batch's means as they are and the penalty is 0 (StudioGAN's
`lecam_ema_start_iter`). Logged with it: `d_real_mean` and `d_fake_mean`, the batch means.

**bCR** (Zhao et al. 2021, "Improved consistency regularization for GANs"):

    bcr_real = mean_x (D(x) - D(T(x)))^2        bcr_fake = mean_z (D(G(z)) - D(T(G(z))))^2
    bcr = bcr_real + bcr_fake                    (the paper's lambda_real = lambda_fake)

T applies the ops of `loss.bcr_ops`, `{op: probability}` in order (the `augment:` ops of
`stagegan.core.augment`); the default `{xflip: 0.5, translation: 1.0}` is StudioGAN's
`CR_DiffAug`, the paper's flip and shift by up to 1/8 of the side. G(z) is held constant:
bCR trains the discriminator. Its random numbers come from the run's augmentation stream, drawn
for the whole global batch before it is split (`Consistency.draw`), so towers agree and a
deterministic run stays deterministic. With `augment:` the discriminator sees x and T(x)
through the same augmentation.
"""

import math

import tensorflow as tf

from stagegan.config.overrides import format_key_path
from stagegan.config.schema import AUGMENT_OPS
from stagegan.core.augment import apply_ops, widths
from stagegan.errors import ConfigError, shown

LECAM_DEFAULTS = {"lecam_decay": 0.99, "lecam_start": 0}
BCR_DEFAULTS = {"bcr_ops": {"xflip": 0.5, "translation": 1.0}}
LECAM_MONITORS = ("d_real_mean", "d_fake_mean")  # logged with `lecam`; feed its averages
BCR_TERMS = ("bcr", "bcr_real", "bcr_fake")
TERMS = ("lecam", *BCR_TERMS)


def lecam_penalty(real, fake, average_real, average_fake):
    """mean relu(real - average_fake)^2 + mean relu(average_real - fake)^2 (StudioGAN's
    `lecam_reg`), the averages held constant."""
    average_real, average_fake = tf.stop_gradient(average_real), tf.stop_gradient(average_fake)
    return tf.reduce_mean(tf.square(tf.nn.relu(real - average_fake))) + tf.reduce_mean(
        tf.square(tf.nn.relu(average_real - fake))
    )


def consistency_loss(outputs, transformed):
    """mean (outputs - transformed)^2: bCR's squared distance, over the batch. A
    discriminator with a map of outputs per sample (a PatchGAN) is compared by each map's
    mean, since a flip or a shift moves the map."""
    per_sample = lambda o: tf.reduce_mean(tf.reshape(o, [tf.shape(o)[0], -1]), axis=1)
    return tf.reduce_mean(tf.square(per_sample(outputs) - per_sample(transformed)))


class LeCam:
    """LeCam's two moving averages and their update (see the module doc).

    Args:
        decay: the averages' decay in [0, 1).
        start: updates during which the averages follow each batch and the penalty is 0.
        device: where the averages live (the variable device).
    """

    def __init__(self, decay, start=0, device=None):
        self.decay, self.start = float(decay), int(start)
        with tf.device(device):
            self.real = tf.Variable(0.0, trainable=False, name="lecam_ema_real")
            self.fake = tf.Variable(0.0, trainable=False, name="lecam_ema_fake")
            self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name="lecam_count")

    def trackables(self):
        return {"lecam_ema_real": self.real, "lecam_ema_fake": self.fake, "lecam_count": self.count}

    @property
    def warm(self):
        """Whether the averages have seen enough updates for the penalty (a bool tensor)."""
        return self.count >= max(self.start, 1)

    def penalty(self, real, fake):
        """The penalty of one shard's outputs on real and generated samples (0 until warm)."""
        on = tf.cast(self.warm, tf.float32)
        return on * lecam_penalty(real, fake, self.real.read_value(), self.fake.read_value())

    def observe(self, terms, applied=None):
        """After an update: fold its averaged `d_real_mean` and `d_fake_mean` into the
        averages, if it reports them, was applied (`applied`: a bool tensor, or None for
        always) and they are finite."""
        if not set(LECAM_MONITORS) <= set(terms):
            return
        real, fake = (tf.cast(terms[name], tf.float32) for name in LECAM_MONITORS)
        counted = tf.logical_and(tf.math.is_finite(real), tf.math.is_finite(fake))
        if applied is not None:
            counted = tf.logical_and(counted, applied)
        decay = tf.where(self.warm, self.decay, 0.0)
        for average, value in ((self.real, real), (self.fake, fake)):
            moved = decay * average + (1.0 - decay) * value
            average.assign(tf.where(counted, moved, average))
        self.count.assign_add(tf.cast(counted, tf.int64))


class Consistency:
    """bCR's transform T: `ops` (`{op: probability}`, in order) with their random numbers.

    Args:
        ops: `{op: probability}`.
    """

    def __init__(self, ops):
        self.ops = tuple(ops)
        self.probabilities = tuple(float(p) for p in ops.values())

    def draw(self, noise, count):
        """Random numbers for `count` real and `count` generated images, from `noise`:
        `{"bcr_real": [count, K], "bcr_fake": [count, K]}`."""
        k = sum(widths(self.ops))
        return {"bcr_real": noise.uniform([count, k]), "bcr_fake": noise.uniform([count, k])}

    def __call__(self, images, uniforms):
        """T(images) [N, H, W, C], with the numbers `uniforms` [N, K] (rows of `draw`)."""
        return apply_ops(images, uniforms, self.ops, self.probabilities)


# Options and the state a run needs ----------------------------------------------------------


def check_options(loss):
    """Check the regularisers' options present in a task's `loss` section.

    Raises:
        ConfigError: `loss.lecam_decay` outside [0, 1), `loss.lecam_start` negative, or
            `loss.bcr_ops` not a non-empty `{op: probability in [0, 1]}`.
    """
    if "lecam_decay" in loss:
        decay = loss["lecam_decay"]
        # Compared first: an int beyond any float compares, but math.isfinite overflows on it.
        if not (0.0 <= decay < 1.0 and math.isfinite(decay)):
            raise ConfigError("loss.lecam_decay", f"must be in [0, 1). Received: {shown(decay)}")
    if "lecam_start" in loss and loss["lecam_start"] < 0:
        raise ConfigError("loss.lecam_start", f"must be 0 or more. Received: {loss['lecam_start']}")
    if "bcr_ops" in loss:
        ops = loss["bcr_ops"]
        if not ops:
            raise ConfigError("loss.bcr_ops", "must name at least one op, as {op: probability}")
        for op, p in ops.items():
            key = format_key_path(("loss", "bcr_ops", op))
            if op not in AUGMENT_OPS:
                raise ConfigError(key, f"unknown op {op!r} (known: {', '.join(AUGMENT_OPS)})")
            number = isinstance(p, (int, float)) and not isinstance(p, bool)
            if not (number and 0.0 <= p <= 1.0 and math.isfinite(p)):
                raise ConfigError(key, f"must be a probability in [0, 1]. Received: {shown(p)}")


def build(task, updates, device=None):
    """The `(LeCam or None, Consistency or None)` that the run's `updates` need from `task`.

    Raises:
        ConfigError: a negative weight on one of these terms (they are penalties).
    """
    known = set(task.loss_terms) & set(TERMS)
    used = set()
    for update in updates:
        for term, weight in update.loss:
            if term in known:
                used.add(term)
                if weight < 0:
                    raise ConfigError(
                        format_key_path((update.key, "loss", term)),
                        f"must be at least 0 (a penalty). Received: {weight:g}",
                    )
    options = {**LECAM_DEFAULTS, **BCR_DEFAULTS, **task.loss}  # a custom task may lack them
    lecam = consistency = None
    if "lecam" in used:
        lecam = LeCam(options["lecam_decay"], options["lecam_start"], device)
    if used & set(BCR_TERMS):
        consistency = Consistency(options["bcr_ops"])
    return lecam, consistency


def observe(context, terms, applied):
    """After an update applies (traced, on the variable device): `terms` are its loss and
    monitor terms averaged over replicas, `applied` a bool tensor (False: skipped by the NaN
    guard or by `every`); moves LeCam's averages (`context`: the task's `Context`)."""
    if context.lecam is not None:
        context.lecam.observe(terms, applied)


def term_state(context, terms):
    """The checkpointed state of loss terms `terms`, `{name: variable}`: restored by a
    rollback with the networks, started fresh by a resume that appends the first stages
    using them (a task's `trackables` is what moves on: a data position)."""
    if context.lecam is not None and "lecam" in terms:
        return context.lecam.trackables()
    return {}


def discriminator_terms(task, terms, batch, outputs, scorers, images):
    """The regularisers' requested terms (and LeCam's monitors) of one shard.

    Args:
        task: its `context` has `lecam` and `consistency` (`build`).
        terms: the requested terms.
        batch: the shard (with `bcr_real` and `bcr_fake` when bCR is on).
        outputs: `(real, fake)`: the discriminator's float32 outputs on the shard's real and
            generated samples (the generated ones held constant).
        scorers: `(real, fake)`: functions of a batch of samples (as in `images`) to those
            outputs, the same functions that made `outputs` (augmentation included).
        images: `(real, fake)`: the samples themselves, before packing.
    """
    requested = set(terms)
    out = {}
    if requested & {"lecam", *LECAM_MONITORS}:
        out.update(zip(LECAM_MONITORS, (tf.reduce_mean(o) for o in outputs), strict=True))
    if "lecam" in requested:
        if task.context.lecam is None:
            raise RuntimeError("lecam requested but regularisers.build made no LeCam state")
        out["lecam"] = task.context.lecam.penalty(*outputs)
    wanted = requested & set(BCR_TERMS)
    if wanted:
        if task.context.consistency is None:
            raise RuntimeError("bcr requested but regularisers.build made no transform")
        halves = {}
        for side, output, score, samples in zip(
            ("real", "fake"), outputs, scorers, images, strict=True
        ):
            if wanted & {"bcr", f"bcr_{side}"}:
                moved = task.context.consistency(samples, batch[f"bcr_{side}"])
                halves[f"bcr_{side}"] = consistency_loss(output, score(moved))
        if "bcr" in wanted:
            out["bcr"] = halves["bcr_real"] + halves["bcr_fake"]
        out.update({t: halves[t] for t in wanted - {"bcr"}})
    return out

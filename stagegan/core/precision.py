"""Mixed precision (`devices.mixed_precision`): the policy, and dynamic loss scaling.

    mixed_precision   Keras policy                               loss scaling
    false             float32                                    none
    float16           mixed_float16                              dynamic
    bfloat16          mixed_bfloat16                             none
    true              mixed_float16 when every tower is a GPU,   dynamic (kept as it was,
                      mixed_bfloat16 on CPUs                     so old runs resume)

Under a mixed policy layers compute in 16 bits and keep float32 variables; loss terms are
cast to float32. bfloat16 has float32's exponent range, so its gradients do not underflow and
it needs no loss scale (Ampere and later GPUs, TPUs; CPUs run it fast only under XLA).

With float16 each optimizer gets a `LossScale`. Its update's loss is multiplied by the scale
before differentiating and the gradients divided by it again, so small float16 gradients do
not underflow. The scale adapts, as in Keras's `LossScaleOptimizer`:

* a step whose loss terms are finite but whose gradients are not (an overflow of the scaled
  gradients) is skipped, like a NaN-guard skip, and halves the scale (down to 1);
* after `period` finite steps in a row the scale doubles (up to 2**24).

Such overflow skips are routine and are not NaN-guard events. A non-finite loss term is, and
so is a non-finite gradient at scale 1, where lowering the scale cannot help any more.
The scale and its count of good steps are checkpointed, so a resumed run goes on with them.
"""

import contextlib

import keras
import tensorflow as tf

INITIAL = 2.0**15
PERIOD = 2000
MAXIMUM = 2.0**24


def policy_name(towers):
    """`mixed_float16` when every tower is a GPU, else `mixed_bfloat16`."""
    if towers and all("GPU" in name.upper() for name in towers):
        return "mixed_float16"
    return "mixed_bfloat16"


def policy_of(setting, towers):
    """The Keras dtype policy of `devices.mixed_precision: setting` (None for false)."""
    if setting is False:
        return None
    if setting is True:
        return policy_name(towers)
    return f"mixed_{setting}"


def loss_scaled(setting, policy):
    """Whether the optimizers get a `LossScale`: under float16 (and `true`, as before)."""
    return policy is not None and (setting is True or policy == "mixed_float16")


def cpu_warning(policy, towers, jit):
    """A line when bfloat16 runs on CPU towers without XLA (measured 8x slower than float32
    for the DCGAN pair), else None. (float16 without a GPU: `placement.gpu_warning`.)"""
    if policy != "mixed_bfloat16" or jit or not any("CPU" in t.upper() for t in towers):
        return None
    return (
        "devices.mixed_precision on CPUs computes in bfloat16, which CPUs run far slower "
        "than float32 without XLA (measured 8x for the DCGAN pair); "
        "add devices.jit: true, or leave mixed precision to GPUs"
    )


@contextlib.contextmanager
def dtype_policy(name):
    """Build networks under the Keras dtype policy `name` (None: leave it alone); the
    previous global policy is restored afterwards."""
    if not name:
        yield
        return
    saved = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(saved)


class LossScale:
    """The dynamic loss scale of one optimizer. Create it on the variable device."""

    def __init__(self, name, initial=INITIAL, period=PERIOD):
        self.period = period
        self.scale = tf.Variable(initial, dtype=tf.float32, trainable=False, name=f"{name}_scale")
        self.good = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{name}_good_steps")

    def trackables(self, key):
        return {f"loss_scale_{key}": self.scale, f"loss_scale_{key}_good_steps": self.good}

    def update(self, terms_ok, grads_ok, active=None):
        """After an application: adapt the scale. Returns whether the NaN guard should count
        the application as skipped (see the module doc). Graph code (no Python branching)."""
        applied = tf.logical_and(terms_ok, grads_ok)
        overflow = tf.logical_and(terms_ok, tf.logical_not(grads_ok))
        at_floor = self.scale <= 1.0
        guard_skip = tf.logical_or(tf.logical_not(terms_ok), tf.logical_and(overflow, at_floor))
        if active is not None:
            applied = tf.logical_and(applied, active)
            overflow = tf.logical_and(overflow, active)
            guard_skip = tf.logical_and(guard_skip, active)
        good = tf.where(
            applied, self.good + 1, tf.where(overflow, tf.zeros_like(self.good), self.good)
        )
        grow = good >= self.period
        scale = tf.where(overflow, tf.maximum(self.scale / 2.0, 1.0), self.scale)
        scale = tf.where(grow, tf.minimum(scale * 2.0, MAXIMUM), scale)
        self.scale.assign(scale)
        self.good.assign(tf.where(grow, tf.zeros_like(good), good))
        return guard_skip

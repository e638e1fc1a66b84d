"""Optimizers from specs: Keras 3 optimizers, each built up front on exactly its variables.

A learning rate may be a schedule (`config.LearningRateSchedule`), built on
`keras.optimizers.schedules`. Keras calls it with the optimizer's own iteration count: the
number of updates that optimizer has applied. So a schedule counts an optimizer's steps, not
global or stage steps: `repeat: k` advances it k times per stage step, an update skipped by
`every` or by the NaN guard does not advance it, and a named optimizer shared by several stages
counts across all of them. The count is checkpointed with the optimizer, so a resumed run goes
on at exactly the same rate.
"""

import inspect

import keras
import tensorflow as tf

from stagegan.config.schema import OPTIMIZER_TYPES, LearningRateSchedule
from stagegan.errors import ConfigError

_NOT_OPTIONS = {"self", "name", "kwargs"}


def make_optimizer(spec, key, name):
    """A Keras optimizer for `spec` (config.OptimizerSpec); option errors name `key`."""
    cls = getattr(keras.optimizers, OPTIMIZER_TYPES[spec.type])
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in _NOT_OPTIONS]
    for option, _ in spec.options:
        if option not in accepted:
            raise ConfigError(
                f"{key}.{option}",
                f"unknown option for {cls.__name__} (known: {', '.join(accepted)})",
            )
    kwargs = spec.kwargs()
    if isinstance(kwargs.get("learning_rate"), LearningRateSchedule):
        kwargs["learning_rate"] = schedule(kwargs["learning_rate"])
    try:
        return cls(name=name, **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(key, f"invalid {cls.__name__} options: {e}") from None


def describe(spec):
    """`adam(beta_1=0.5, learning_rate=0.0001)`; a schedule reads
    `learning_rate=linear(0.0005 -> 0 over 2000 iterations)`; an optimizer scaled for lazy
    updates says so: `... (lazy, every 16: learning rate x 16/17, betas ** 16/17)`."""

    def value(v):
        if isinstance(v, LearningRateSchedule):
            return v.describe()
        return f"{v:g}" if isinstance(v, float) else f"{v}"

    options = ", ".join(f"{k}={value(v)}" for k, v in spec.options)
    text = f"{spec.type}({options})"
    if spec.lazy:
        n = spec.lazy
        betas = f", betas ** {n}/{n + 1}" if "beta_1" in dict(spec.options) else ""
        text += f" (lazy, every {n}: learning rate x {n}/{n + 1}{betas})"
    return text


def schedule(spec):
    """The Keras learning-rate schedule of a `config.LearningRateSchedule`."""
    schedules = keras.optimizers.schedules
    if spec.kind == "constant":
        after = spec.initial
    elif spec.kind == "linear":
        after = schedules.PolynomialDecay(spec.initial, spec.steps, spec.final, power=1.0)
    elif spec.kind == "cosine":
        after = schedules.CosineDecay(spec.initial, spec.steps, alpha=spec.final / spec.initial)
    else:
        after = schedules.ExponentialDecay(
            spec.initial, spec.steps, spec.decay_rate, staircase=spec.staircase
        )
    if spec.warmup or not callable(after):
        return WarmUp(after, spec.initial, spec.warmup)
    return after


class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak` over `steps` iterations, then `after` (a schedule or a
    constant) counted from the end of the warm-up. With `steps` 0 it is `after` alone."""

    def __init__(self, after, peak, steps):
        self.after, self.peak, self.steps = after, peak, steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        after = self.after
        if callable(after):
            after = after(tf.maximum(step - self.steps, 0.0))
        after = tf.cast(after, tf.float32)
        if not self.steps:
            return after
        ramp = self.peak * step / self.steps
        return tf.where(step < self.steps, ramp, after)

    def get_config(self):
        after = self.after
        if callable(after):
            after = keras.optimizers.schedules.serialize(after)
        return {"after": after, "peak": self.peak, "steps": self.steps}

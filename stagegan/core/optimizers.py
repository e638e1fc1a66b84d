"""Optimizers from specs: Keras 3 optimizers, each built up front on exactly its variables.

A learning rate may be a schedule (`config.LearningRateSchedule`), built on
`keras.optimizers.schedules`. Keras calls it with the optimizer's own iteration count: the
number of updates that optimizer has applied. So a schedule counts an optimizer's steps, not
global or stage steps: `repeat: k` advances it k times per stage step, an update skipped by
`every` or by the NaN guard does not advance it, and a named optimizer shared by several stages
counts across all of them. The count is checkpointed with the optimizer, so a resumed run goes
on at exactly the same rate.

`adam` and `adamw` are Keras's, with one change: each variable's update is TensorFlow's fused
kernel (`ResourceApplyAdam`, as TF 1 and Keras 2 applied Adam) instead of Keras 3's twenty-odd
element-wise ops. Same variables, checkpoints and formula (the bias correction folded into the
step size, epsilon outside the square root); `1 - beta` is computed in the variable's dtype, so
results differ from Keras 3's by float32 rounding (about 1e-7 after a few steps). What it is
for: a step function's trace builds a graph op by op in Python, and Keras's Adam was a fifth
to a third of the ops traced by the in-process tests (`docs/design.md`, the test suite); the
first step of each stage takes 0.6 to 0.8 of its time before (`benchmarks/startup_cost.py`).
"""

import inspect

import keras
import tensorflow as tf

from stagegan.config.schema import OPTIMIZER_TYPES, LearningRateSchedule
from stagegan.errors import ConfigError

_NOT_OPTIONS = {"self", "name", "kwargs"}


class _FusedAdamStep:
    """`update_step` of Keras's Adam as one `ResourceApplyAdam` per variable (see above).
    AMSGrad and sparse gradients (`tf.IndexedSlices`) keep Keras's own update."""

    _scalars = None  # {dtype: kernel scalars} of the application being traced

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        # Keras's one call per application, before every variable's `update_step`: the
        # iteration count (in the beta powers) must be read anew after each application.
        # (`object.__setattr__`: not a tracked attribute, never part of a checkpoint.)
        object.__setattr__(self, "_scalars", {})
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            object.__setattr__(self, "_scalars", None)

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            grad=tf.cast(gradient, variable.dtype),
            **self._kernel_scalars(learning_rate, variable.dtype),
        )

    def _kernel_scalars(self, learning_rate, dtype):
        """The kernel's scalar inputs, built once per application and dtype."""
        if self._scalars is not None and dtype in self._scalars:
            return self._scalars[dtype]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        scalars = dict(
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
        )
        if self._scalars is not None:
            self._scalars[dtype] = scalars
        return scalars


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable; inside a strategy's update, a
    distributed variable's handle is this replica's copy."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


@keras.saving.register_keras_serializable("stagegan")
class Adam(_FusedAdamStep, keras.optimizers.Adam):
    """`keras.optimizers.Adam`, each variable's update one fused kernel."""


@keras.saving.register_keras_serializable("stagegan")
class AdamW(_FusedAdamStep, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` (its weight decay is applied apart, as in Keras), each
    variable's Adam update one fused kernel."""


# Config types with a class of stagegan's own; the rest are `keras.optimizers`' classes.
CLASSES = {"adam": Adam, "adamw": AdamW}


def make_optimizer(spec, key, name):
    """A Keras optimizer for `spec` (config.OptimizerSpec); option errors name `key`."""
    cls = CLASSES.get(spec.type) or getattr(keras.optimizers, OPTIMIZER_TYPES[spec.type])
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

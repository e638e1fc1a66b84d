"""Towers: one copy of the computation per device, gradients averaged where the variables live.

This is the TF1 `cifar10_multi_gpu_train.py` recipe made safe for stages:

* each tower computes its losses and gradients on its own device, on its shard of the batch;
* `average_gradients` drops None gradients (variables the loss does not reach) and averages the
  rest on the variable device, where the optimizer applies them.

BatchNormalization: tower 0 runs normally; towers 1..N-1 run together inside one
`keras.StatelessScope`, which discards their variable writes. So moving statistics are updated
once per step, from tower 0's shard, as in the TF1 multi-GPU examples. Running the other towers
in one shared scope (not one scope each) keeps stateful RNG layers such as Dropout drawing
different masks on every tower.
"""

import contextlib
import re
from dataclasses import dataclass

import keras
import tensorflow as tf

from stagegan.config import check_batch_divides
from stagegan.errors import ConfigError


@dataclass(frozen=True)
class Devices:
    """Where the towers compute and where variables and optimizer slots live."""

    towers: tuple
    variables: str


def resolve_devices(config, batch_size):
    """Turn `devices:` into concrete device names, splitting the CPU when there is no GPU.

    `towers: N` uses N GPUs; with no GPU it splits the CPU into N logical devices (which must
    happen before TensorFlow initialises its devices). `auto` is every visible GPU, or one CPU.

    Raises:
        ConfigError: more towers than devices, an unknown device name, or a batch that does
            not divide across the towers.
    """
    gpus = tf.config.list_physical_devices("GPU")
    towers = config.towers
    if towers == "auto":
        names = [f"/GPU:{i}" for i in range(len(gpus))] or ["/CPU:0"]
    elif isinstance(towers, int):
        if gpus:
            if towers > len(gpus):
                raise ConfigError(
                    "devices.towers",
                    f"{towers} towers requested but only {len(gpus)} GPUs are visible",
                )
            names = [f"/GPU:{i}" for i in range(towers)]
        else:
            names = [f"/CPU:{i}" for i in range(towers)]
    else:
        names = [_normalise(name, "devices.towers") for name in towers]
    variables = _normalise(config.variables, "devices.variables")
    wanted_cpus = max(
        [_index(name) + 1 for name in names + [variables] if name.startswith("/CPU:")], default=1
    )
    split_cpu(wanted_cpus)
    available = {_normalise(d.name, "devices") for d in tf.config.list_logical_devices()}
    for key, name in [("devices.towers", n) for n in names] + [("devices.variables", variables)]:
        if name not in available:
            raise ConfigError(
                key, f"device {name} does not exist (available: {', '.join(sorted(available))})"
            )
    check_batch_divides(batch_size, len(names))
    return Devices(towers=tuple(names), variables=variables)


def split_cpu(count):
    """Make at least `count` logical CPU devices (`/CPU:0`...), if TensorFlow still allows it.

    Raises:
        ConfigError: when TensorFlow was already initialised with fewer CPU devices.
    """
    if count <= 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu) or [None]
    if len(current) < count:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
            )
        except RuntimeError:
            pass  # already initialised; checked below
    available = len(tf.config.list_logical_devices("CPU"))
    if available < count:
        raise ConfigError(
            "devices.towers",
            f"{count} CPU towers requested, but TensorFlow was already started with {available} "
            "CPU devices in this process",
        )


def _normalise(name, key):
    match = re.fullmatch(r"/?(?:device:)?(CPU|GPU|cpu|gpu):(\d+)", str(name).split("/device:")[-1])
    if not match:
        raise ConfigError(key, f"device names look like /CPU:0 or /GPU:1. Received: {name!r}")
    return f"/{match.group(1).upper()}:{int(match.group(2))}"


def _index(name):
    return int(name.rsplit(":", 1)[1])


def split_batch(batch, count):
    """Split every tensor of a batch (a dict) along axis 0 into `count` equal shards."""
    if count == 1:
        return [batch]
    pieces = {key: tf.split(value, count, axis=0) for key, value in batch.items()}
    return [{key: pieces[key][i] for key in batch} for i in range(count)]


@dataclass
class TowerResult:
    """One tower's loss terms and, per update, its gradients (None where a variable is unused)."""

    terms: dict
    gradients: list


def tower_gradients(compute_terms, updates, shards, devices, jit=False, scales=None):
    """Run every tower on its shard and differentiate each update's loss on its own variables.

    Args:
        compute_terms: `shard -> {term: scalar}`, the forward pass (loss terms for one shard).
        updates: list of `(weights, variables)`; `weights` is a sequence of (term, weight).
            Each update's weighted loss is differentiated only with respect to its variables,
            so in a joint stage the discriminator's loss never moves the generator.
        shards: one batch dict per tower.
        devices: one device name per tower.
        jit: compile each tower's pass with XLA, on its own device (see `tower_pass`).
        scales: None, or one loss scale (a scalar tensor, or None) per update.

    Returns:
        A list of `TowerResult`, one per tower.
    """
    results = []
    stateless = keras.StatelessScope()
    for index, (shard, device) in enumerate(zip(shards, devices, strict=True)):
        # Towers 1.. throw their variable writes away (BN statistics). They share one scope
        # (so stateful RNG layers such as Dropout draw different masks on every tower), except
        # under XLA, where each compiled tower needs its own.
        if index == 0:
            scope = contextlib.nullcontext
        else:
            scope = keras.StatelessScope if jit else (lambda: stateless)
        run = lambda shard, scope=scope: tower_pass(compute_terms, updates, shard, scales, scope)
        with tf.device(device):
            terms, gradients = compiled(run, jit)(shard)
        results.append(TowerResult(terms=terms, gradients=gradients))
    return results


def compiled(function, jit):
    """`function` compiled with XLA when `jit` (a fresh `tf.function` per call site, traced
    once inside the stage step's own single trace), else `function` itself."""
    if not jit:
        return function
    return tf.function(function, jit_compile=True, autograph=False)


def tower_pass(compute_terms, updates, shard, scales=None, scope=contextlib.nullcontext):
    """One tower's (or replica's) forward and backward pass: `(terms, gradients)`.

    `gradients[k]` is aligned with update k's variables (None where its loss does not reach
    a variable). With `scales`, update k's loss is multiplied by `scales[k]` before
    differentiating and its gradients divided by it again (mixed precision's loss scaling,
    which keeps small float16 gradients from underflowing); gradients come back as float32.
    `scope()` is entered around the forward pass (e.g. a `keras.StatelessScope`).
    """
    scales = scales or [None] * len(updates)
    with tf.GradientTape(persistent=len(updates) > 1) as tape:
        with scope():
            terms = compute_terms(shard)
        losses = [weighted_loss(terms, weights) for weights, _ in updates]
        losses = [
            loss if scale is None else loss * scale
            for loss, scale in zip(losses, scales, strict=True)
        ]
    gradients = []
    for loss, (_, variables), scale in zip(losses, updates, scales, strict=True):
        grads = tape.gradient(loss, variables)
        if scale is not None:
            grads = [
                None if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32) / scale
                for g in grads
            ]
        gradients.append(grads)
    del tape
    return terms, gradients


def finite_flags(terms, names, gradients):
    """One tower's finiteness, a bool vector: each loss term in `names`, then all of
    `gradients` together (None entries skipped; IndexedSlices by their values)."""
    flags = [tf.math.is_finite(terms[name]) for name in names]
    checks = [
        tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
        for g in gradients
        if g is not None
    ]
    flags.append(tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True))
    return tf.stack(flags)


def weighted_loss(terms, weights):
    """The weighted sum of named loss terms."""
    total = None
    for term, weight in weights:
        value = terms[term] if weight == 1.0 else weight * terms[term]
        total = value if total is None else total + value
    return total


def average_gradients(tower_grads, variables):
    """Average per-tower gradients, dropping None. The one averaging rule of stagegan.

    Args:
        tower_grads: one list per tower, aligned with `variables` (entries may be None).
        variables: the variables the gradients belong to.

    Returns:
        `(pairs, dropped)`: `pairs` is a list of `(mean_gradient, variable)` for the variables
        that got a gradient; `dropped` lists the variables no tower produced a gradient for.
        A tower with None for a variable that others reach counts as a zero gradient, so the
        mean is always over all towers (the gradient of the mean of the tower losses).
    """
    count = len(tower_grads)
    pairs, dropped = [], []
    for j, variable in enumerate(variables):
        grads = [tf.convert_to_tensor(g[j]) for g in tower_grads if g[j] is not None]
        if not grads:
            dropped.append(variable)
            continue
        mean = grads[0] if count == 1 else tf.add_n(grads) / count
        pairs.append((mean, variable))
    return pairs, dropped


def average_terms(tower_terms):
    """Average each loss term over towers (equal shards: the global-batch mean)."""
    if len(tower_terms) == 1:
        return dict(tower_terms[0])
    return {k: tf.add_n([t[k] for t in tower_terms]) / len(tower_terms) for k in tower_terms[0]}

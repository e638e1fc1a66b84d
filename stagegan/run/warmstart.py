"""Warm start: a new run whose networks start from another run's checkpoint.

    python -m stagegan train --config C --init-from runs/00003-x [--init-checkpoint 5000]
                             [--init-only 'generator/*']

The flags set the config's `init:` section, which the new run's `config.yaml` keeps (with the
checkpoint's step filled in), so the run records where its weights came from. Every network
variable (weights and state such as BatchNorm statistics; `init.only` restricts them by glob
pattern) takes the checkpoint's value under the same Keras path; the EMA too, when both runs
keep one of the same network (else it starts from the copied weights). Optimizers, the global
step and the random streams start fresh, as in any new run. A resumed run restores its own
checkpoints and never warm-starts again.

`runs.resolve_init` checks the source run without TensorFlow; `warm_start` copies, after checking
every variable first: a missing variable or a shape mismatch is one `ConfigError` naming it,
and nothing is copied.
"""

import logging

import tensorflow as tf

from stagegan.core.replicas import is_rng_state
from stagegan.core.variables import select_variables
from stagegan.errors import ConfigError, first_line

log = logging.getLogger("stagegan")
SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def warm_start(trainer, prefix):
    """Copy the networks' (and EMA's) values from checkpoint `prefix` into `trainer`.

    Returns:
        The number of network variables copied.

    Raises:
        ConfigError: the checkpoint is unreadable, or lacks a variable, or holds it in
            another shape; `init.only` patterns that match nothing.
    """
    init = trainer.config.init
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as e:
        raise ConfigError("init.run", f"cannot read {prefix}: {first_line(e)}") from None
    weights = [w for net in trainer.networks.values() for w in net.weights if not is_rng_state(w)]
    if init.only is not None:
        weights = select_variables(init.only, weights, "init.only")
    try:  # every tensor is read (and its checksum checked) before anything is assigned
        values, averages = _read_all(trainer, reader, shapes, weights, prefix)
    except tf.errors.OpError as e:
        raise ConfigError("init.run", f"cannot read {prefix}: {first_line(e)}") from None
    for variable in weights:
        variable.assign(values[id(variable)])
    for average, value in averages:
        average.assign(value)
    log.info(
        "warm start: %d network variables%s from %s",
        len(weights),
        f" ({', '.join(init.only)})" if init.only else "",
        prefix,
    )
    return len(weights)


def _read_all(trainer, reader, shapes, weights, prefix):
    values = {}
    for variable in weights:
        values[id(variable)] = _value(reader, shapes, variable.path, variable, prefix)
    averages = []
    if trainer.ema is not None:
        chosen = {id(w) for w in weights}
        for source, average in zip(trainer.ema.sources, trainer.ema.averages, strict=True):
            if id(source) not in chosen:
                continue
            key = "ema:" + source.path
            found = _key(key) in shapes and list(shapes[_key(key)]) == list(source.shape)
            value = reader.get_tensor(_key(key)) if found else values[id(source)]
            averages.append((average, value))
    return values, averages


def _key(path):
    return path.replace("/", ":") + SUFFIX


def _value(reader, shapes, path, variable, prefix):
    key = _key(path)
    if key not in shapes:
        raise ConfigError(
            "init.run",
            f"{path} is not in {prefix} (the networks differ; --init-only PATTERN copies a part)",
        )
    if list(shapes[key]) != list(variable.shape):
        raise ConfigError(
            "init.run",
            f"{path} has shape {list(variable.shape)} here but {list(shapes[key])} in {prefix}",
        )
    return reader.get_tensor(key)

"""Optimizers from specs: Keras 3 optimizers, each built up front on exactly its variables."""

import inspect

import keras

from stagegan.errors import ConfigError

KERAS_CLASSES = {
    "sgd": "SGD",
    "adam": "Adam",
    "adamw": "AdamW",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "adamax": "Adamax",
    "nadam": "Nadam",
    "lion": "Lion",
}
_NOT_OPTIONS = {"self", "name", "kwargs"}


def make_optimizer(spec, key, name):
    """A Keras optimizer for `spec` (config.OptimizerSpec); option errors name `key`."""
    cls = getattr(keras.optimizers, KERAS_CLASSES[spec.type])
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in _NOT_OPTIONS]
    for option, _ in spec.options:
        if option not in accepted:
            raise ConfigError(
                f"{key}.{option}",
                f"unknown option for {cls.__name__} (known: {', '.join(accepted)})",
            )
    try:
        return cls(name=name, **spec.kwargs())
    except (TypeError, ValueError) as e:
        raise ConfigError(key, f"invalid {cls.__name__} options: {e}") from None


def describe(spec):
    """`adam(learning_rate=0.0001, beta_1=0.5)`."""
    options = ", ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in spec.options
    )
    return f"{spec.type}({options})"

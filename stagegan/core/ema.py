"""Exponential moving average of one network's weights (`ema:` in the run config).

The average covers every weight of the network, BatchNorm statistics included, lives on the
variable device, is updated inside each stage's step function after the step's updates, and
is checkpointed with everything else under `ema:<variable path>`. Sampling swaps it into the
network for the duration of the call (`Ema.swapped`).

Under `mirrored` and `multi_worker` (whose networks are mirrored variables, a copy on each
replica's device) the average is mirrored too, and each replica's copy is updated on its own
device from its own copy of the weights (`strategy.extended.update`): no weight goes to the
host and back each step, and the copies stay equal as the weights do.
"""

import contextlib

import tensorflow as tf

from stagegan.errors import ConfigError


class Ema:
    """The average of `network`'s weights.

    Args:
        config: a `config.EmaConfig`.
        networks: the task's `{scope: keras.Model}`; `config.network` picks one.
        device: the variable device.
        strategy: the `tf.distribute` strategy whose scope built mirrored networks, or None.
    """

    def __init__(self, config, networks, device, strategy=None):
        if config.network not in networks:
            raise ConfigError(
                "ema.network",
                f"no network {config.network!r} (the task has: {', '.join(networks)})",
            )
        self.config, self.strategy = config, strategy
        self.sources = list(networks[config.network].weights)
        scope = strategy.scope() if strategy is not None else tf.device(device)
        with scope:
            self.averages = [
                tf.Variable(tf.convert_to_tensor(v), trainable=False, name="ema")
                for v in self.sources
            ]

    def update(self, global_step):
        """Fold the current weights in (`global_step`: steps completed, after this one)."""
        active = tf.cast(global_step > self.config.start, tf.float32)
        decay = active * self.config.decay  # 0 before `start`: the average follows the weights

        def fold(average, source):
            value = tf.cast(tf.convert_to_tensor(source), tf.float32)
            mixed = decay * tf.cast(average, tf.float32) + (1.0 - decay) * value
            return average.assign(tf.cast(mixed, average.dtype))

        for average, source in zip(self.averages, self.sources, strict=True):
            if self.strategy is None:
                fold(average, source)
            else:  # on each replica's device, its copy from its copy
                # A Keras variable wraps the (mirrored) tf.Variable that `update` unwraps.
                variable = source if isinstance(source, tf.Variable) else source.value
                self.strategy.extended.update(average, fold, args=(variable,))

    @contextlib.contextmanager
    def swapped(self):
        """Within the block the network holds the averaged weights; restored afterwards."""
        saved = [tf.identity(tf.convert_to_tensor(v)) for v in self.sources]
        try:
            for source, average in zip(self.sources, self.averages, strict=True):
                source.assign(average)
            yield
        finally:
            for source, value in zip(self.sources, saved, strict=True):
                source.assign(value)

    def trackables(self):
        return {
            "ema:" + source.path.replace("/", ":"): average
            for source, average in zip(self.sources, self.averages, strict=True)
        }

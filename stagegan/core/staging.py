"""Real batches drawn one step ahead into a buffer on the device that consumes them.

A task whose real batches are read on the host ("staged" in `Task.capabilities`: a tf.data
iterator, or a gather from images held in host memory) would otherwise make every step wait
for the read and the host-to-device copy before its first layer runs. `Staging` keeps the next
global batch in variables on the step's draw device (`Placement.variables`: the GPU in the
one-GPU layout): a step consumes the batch that is already there and, in the same step
function, reads and copies the following one into the buffer. The two share no data, so
TensorFlow's executor runs the read and copy while the networks compute (the `StagingArea`
of TensorFlow 1's multi-GPU benchmarks, with a variable in place of the queue).

What changes nothing:
* the order: the step that finds the buffer empty (the first step of a run, or a resumed
  run whose checkpoint holds no staged batch) draws its own batch first, then the next one,
  so the batches consumed are those an unstaged run consumes, in the same order (while the
  stages draw batches of one size; with `stages[i].batch_size` each size has its own
  buffer, and the batch the last step of a size drew ahead waits in it for the next stage of
  that size, or is never used);
* the position: the buffer and its `full` flag are checkpointed with the data iterator (or
  the data stream), so a resumed run consumes exactly what the uninterrupted run would.

Images stay uint8 in the buffer (a quarter of float32's bytes to copy and hold); each
replica converts its own shard to float on its own device (`to_replica_floats`).

A staged task's `real_batch` must depend only on its own reader and the data stream
(`rngs.data`), not on the training state (the step, the stage, the weights) or the noise
stream: batch n + 1 is read during step n, across stage ends too.
"""

import tensorflow as tf

from stagegan.core.variables import STAGED_PREFIX


class Staging:
    """One global batch, staged.

    Args:
        fetch: `() -> {name: tensor}`, the task's real batch (`Task.real_batch`); called
            inside the step functions, where the unstaged run calls it.
        device: where the buffer lives (the draw device).
        name: told apart from the other stagings of a run (one for each batch size its
            stages draw): `""` for the run's `batch_size`, `"b16_"` for 16.
    """

    def __init__(self, fetch, device, name=""):
        self.fetch, self.name = fetch, name
        # The buffer's shapes and dtypes, from a trace of `fetch` that never runs (no
        # batch is read, no random number drawn).
        spec = tf.function(fetch, autograph=False).get_concrete_function().structured_outputs
        with tf.device(device):
            self.buffer = {
                key: tf.Variable(
                    tf.zeros(value.shape, value.dtype), trainable=False, name=f"staged_{name}{key}"
                )
                for key, value in spec.items()
            }
            self.full = tf.Variable(False, trainable=False, name=f"staged_{name}full")

    def next(self):
        """The staged batch (fetched now when the buffer is empty), and the following
        batch fetched into the buffer."""
        held = lambda: {name: v.read_value() for name, v in self.buffer.items()}
        current = tf.cond(self.full.read_value(), held, self.fetch)
        following = self.fetch()
        for name, variable in self.buffer.items():
            variable.assign(following[name])
        self.full.assign(True)
        return current

    def trackables(self):
        """The checkpointed buffer (`data_staged_<key>`, `data_staged_full`; named:
        `data_staged_b16_x`, `data_staged_b16_full`)."""
        prefix = f"{STAGED_PREFIX}{self.name}"
        objects = {f"{prefix}{key}": v for key, v in self.buffer.items()}
        return {**objects, f"{prefix}full": self.full}


def to_replica_floats(shard):
    """A shard whose images `x` are uint8 in [0, 255], with them as float32 in [-1, 1],
    converted where it is called: inside a replica's pass, on that replica's device. Other
    tensors (labels, masks, whatever their dtype) and float images pass unchanged."""
    images = shard.get("x")
    if images is None or images.dtype != tf.uint8:
        return shard
    return {**shard, "x": pixels_to_float(images)}


def pixels_to_float(images):
    """uint8 pixels in [0, 255] to float32 in [-1, 1]."""
    return tf.cast(images, tf.float32) / 127.5 - 1.0

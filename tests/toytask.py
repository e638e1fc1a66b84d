"""A tiny GAN for tests, used through the `package.module:factory` path like a user's task.

G: z (2) -> Dense(3, tanh) -> Dense(2) (model.hidden: the 3).
D: x (2) -> Dense(4, tanh) -> Dense(1).
Real data: N((1, -1), 0.5^2). Loss terms:
    d_loss = mean softplus(-D(x)) + mean softplus(D(stop_gradient(G(z))))
    g_loss = mean softplus(-D(G(z)))
d_loss stops the gradient into G, so a pattern over both networks leaves G's gradient None.
Options: model.batchnorm puts a BatchNormalization layer first in D, model.generator_batchnorm
one after G's hidden layer. data.nan_draws (a list of
real-batch draw numbers, counted from 0 over the run) and data.nan_row put a NaN into that row
of those global batches: the NaN reaches d_loss in the tower whose shard holds the row.
Evaluation: `gap`, the L1 distance between the mean of G's outputs on the four latents
`EVAL_Z` and the data mean (lower is better; computed by hand from the weights in tests).
"""

import keras
import numpy as np
import tensorflow as tf

from stagegan import register_metric
from stagegan.tasks.base import Task

EVAL_Z = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]


class ToyTask(Task):
    name = "toy"
    loss_terms = ("d_loss", "g_loss")
    metrics = ("gap",)  # declared below: `stagegan.register_metric`
    defaults = {
        "data": {"mean": 1.0, "nan_draws": None, "nan_row": 0},
        "model": {"batchnorm": False, "generator_batchnorm": False, "hidden": 3},
        "loss": {},
    }

    def build(self):
        with keras.name_scope("generator"):
            z = keras.Input((2,))
            h = keras.layers.Dense(self.model["hidden"], activation="tanh", name="hidden")(z)
            if self.model["generator_batchnorm"]:
                h = keras.layers.BatchNormalization(name="bn")(h)
            self.generator = keras.Model(z, keras.layers.Dense(2, name="out")(h))
        with keras.name_scope("discriminator"):
            x = keras.Input((2,))
            h = x
            if self.model["batchnorm"]:
                h = keras.layers.BatchNormalization(name="bn")(h)
            h = keras.layers.Dense(4, activation="tanh", name="hidden")(h)
            self.discriminator = keras.Model(x, keras.layers.Dense(1, name="out")(h))
        self.networks = {"generator": self.generator, "discriminator": self.discriminator}
        self.draws = tf.Variable(0, dtype=tf.int64, trainable=False)
        return self.networks

    def trackables(self):
        return {**super().trackables(), "toy_draws": self.draws}

    def real_batch(self, batch_size):
        mean = tf.constant([self.data["mean"], -self.data["mean"]])
        x = mean + 0.5 * self.rngs.data.normal([batch_size, 2])
        if self.data["nan_draws"]:
            draw = self.draws.assign_add(1) - 1
            poisoned = tf.reduce_any(tf.equal(draw, tf.constant(self.data["nan_draws"], tf.int64)))
            row = tf.equal(tf.range(batch_size), self.data["nan_row"])[:, None]
            x = tf.where(tf.logical_and(poisoned, row), float("nan"), x)
        return {"x": x}

    def random_inputs(self, batch_size):
        return {"z": self.rngs.noise.normal([batch_size, 2])}

    def losses(self, batch, terms):
        fake = self.generator(batch["z"], training=True)
        out = {}
        if "d_loss" in terms:
            real_logits = self.discriminator(batch["x"], training=True)
            fake_logits = self.discriminator(tf.stop_gradient(fake), training=True)
            out["d_loss"] = tf.reduce_mean(tf.nn.softplus(-real_logits)) + tf.reduce_mean(
                tf.nn.softplus(fake_logits)
            )
        if "g_loss" in terms:
            out["g_loss"] = tf.reduce_mean(tf.nn.softplus(-self.discriminator(fake, training=True)))
        return out

    def sample(self, inputs):
        return self.generator(inputs["z"], training=False)


@register_metric("gap", mode="min")
def gap(evaluation):
    """L1 distance between the mean of G's outputs on `EVAL_Z` and the data mean."""
    task = evaluation.task
    out = task.generator(tf.constant(EVAL_Z), training=False).numpy()
    target = np.array([task.data["mean"], -task.data["mean"]])
    return float(np.abs(out.mean(axis=0) - target).sum())


def factory(options, rngs):
    return ToyTask(options, rngs)


def not_a_task(options, rngs):
    """A factory whose object has the four methods but is no `Task` (refused)."""
    return {"build": dict, "batch": dict, "losses": dict, "sample": dict}


# Run configs over the toy task, and checkpoint reading: the one set the tests share --------

D_UPDATE = {"name": "discriminator", "train": "discriminator/*", "loss": "d_loss", "optimizer": "d"}
G_UPDATE = {"name": "generator", "train": "generator/*", "loss": "g_loss", "optimizer": "g"}
# Unnamed: an update's name then defaults to its optimizer key (g, d).
G = {"train": "generator/*", "loss": "g_loss", "optimizer": "g"}
D = {"train": "discriminator/*", "loss": "d_loss", "optimizer": "d"}
# Every kind of stage, 10 steps: g 2 + 2 + 3 applications, d 4 + 3 + 3.
ALL_KINDS = [
    {"name": "g_only", "steps": 2, "updates": [G]},
    {"name": "d_only", "steps": 2, "updates": [{**D, "repeat": 2}]},
    {"name": "alternating", "steps": 3, "updates": [D, {**G, "every": 2}]},
    {"name": "joint", "steps": 3, "mode": "simultaneous", "updates": [D, G]},
]


def optimizers(kind="sgd", g=0.1, d=0.05):
    """Named optimizers `g` and `d` of one kind."""
    return {"g": {"type": kind, "learning_rate": g}, "d": {"type": kind, "learning_rate": d}}


def toy_config(stages, name="toy", seed=0, batch_size=8, **changes):
    """A raw run config over the toy task (SGD `optimizers()` unless `changes` say);
    `changes` override top-level keys."""
    raw = {
        "name": name,
        "seed": seed,
        "task": "toytask:factory",
        "batch_size": batch_size,
        "optimizers": optimizers(),
        "stages": stages,
    }
    raw.update(changes)
    return raw


def two_stage_config(name, seed, first, joint, first_name="d_only", first_updates=None, **changes):
    """A raw run config: `first` steps of D alone (or `first_updates`), then `joint` steps of D
    and G together; Adam at 0.01, a checkpoint every step, a log line every step, TensorBoard
    and sample dumps off. `changes` override top-level keys."""
    stages = [
        {"name": first_name, "steps": first, "updates": first_updates or [D_UPDATE]},
        {"name": "joint", "steps": joint, "mode": "simultaneous", "updates": [D_UPDATE, G_UPDATE]},
    ]
    defaults = {
        "optimizers": optimizers("adam", 0.01, 0.01),
        "checkpoint": {"every": 1, "keep": 10},
        "log": {"every": 1, "tensorboard": False},
        "samples": None,
    }
    return toy_config(stages, name, seed, **{**defaults, **changes})


def finished_run(run_dir, raw):
    """Train run config `raw` to its end, in process, into the new folder `run_dir` (with its
    `config.yaml`, as the CLI writes it); returns `run_dir`."""
    from stagegan.config.schema import parse_config
    from stagegan.training.loop import train
    from stagegan.training.trainer import Trainer

    run_dir.mkdir()
    config = parse_config(raw)
    (run_dir / "config.yaml").write_text(config.to_yaml())
    train(Trainer(config), run_dir)
    return run_dir


def read_checkpoint(prefix, skip=None):
    """Every value in a checkpoint: `{key: array}`, keyed as `tf.train.list_variables` names
    them (`generator:hidden:kernel/.ATTRIBUTES/VARIABLE_VALUE`); keys starting with `skip`
    (e.g. a tf.data iterator's state, a variant numpy cannot hold) are left out."""
    reader = tf.train.load_checkpoint(str(prefix))
    keys = reader.get_variable_to_shape_map()
    return {key: reader.get_tensor(key) for key in keys if not (skip and key.startswith(skip))}


def variable_key(path):
    """The checkpoint key of a network variable (`generator/hidden/kernel`) or of a top-level
    object (`global_step`)."""
    return path.replace("/", ":") + "/.ATTRIBUTES/VARIABLE_VALUE"


class BranchingToyTask(ToyTask):
    """The toy task with a Python `if` on a tensor in its losses: a task's methods run
    through AutoGraph, as in any `tf.function`. The branch scales g_loss by 2 when the
    batch mean of x is above `data.mean`'s first coordinate minus 10 (always, here)."""

    def losses(self, batch, terms):
        out = super().losses(batch, terms)
        if "g_loss" in out:
            if tf.reduce_mean(batch["x"][:, 0]) > self.data["mean"] - 10.0:
                out["g_loss"] = 2.0 * out["g_loss"]
            else:
                out["g_loss"] = out["g_loss"] + 0.0
        return out


def branching_factory(options, rngs):
    return BranchingToyTask(options, rngs)


class BlockingToyTask(ToyTask):
    """The toy task whose real batches block forever after `data.block_after` draws, as a
    reader stuck on a fifo or a dead network mount would: inside the step,
    where Python's signal handlers cannot run."""

    defaults = {**ToyTask.defaults, "data": {**ToyTask.defaults["data"], "block_after": 4}}

    def real_batch(self, batch_size):
        batch = super().real_batch(batch_size)
        draw = self.draws.assign_add(1)

        def wait(draw):
            if int(draw) > self.data["block_after"]:
                import time

                time.sleep(3600)
            return draw

        waited = tf.py_function(wait, [draw], tf.int64)
        waited.set_shape([])
        return {**batch, "x": batch["x"] + 0.0 * tf.cast(waited, tf.float32)}


def blocking_factory(options, rngs):
    return BlockingToyTask(options, rngs)


# Shared helpers of the tests ------------------------------------------------------------------


def run_steps(trainer, count=None):
    """Run the trainer's remaining steps (or only the next `count`); their `StepOutput`s."""
    positions = list(trainer.schedule.positions(trainer.step_count))
    return [trainer.step(position) for position in positions[:count]]


def snapshot(trainer, state=False):
    """`{variable path: numpy copy}` of the trainable variables (and with `state` the
    networks' non-trainable ones: BatchNorm statistics, spectral-norm vectors)."""
    variables = [*trainer.variables, *(trainer.state_variables() if state else [])]
    return {v.path: v.numpy().copy() for v in variables}


def network_weights(trainer):
    """Every network's weights (Keras order, network by network), as numpy arrays."""
    return [w for network in trainer.networks.values() for w in network.get_weights()]


def max_diff(values, reference):
    """The largest absolute difference between `{path: array}` `values` and `reference`,
    over `reference`'s paths."""
    return max(float(np.max(np.abs(values[p] - reference[p]))) for p in reference)

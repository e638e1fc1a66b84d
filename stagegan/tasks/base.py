"""The task interface: what the trainer needs from a GAN.

A task builds its networks, draws batches, computes named loss terms for one tower's shard of
a batch, and produces samples. The trainer never looks inside the networks; it only trains the
variables that a stage's patterns select.

    class MyTask(Task):
        loss_terms = ("d_loss", "g_loss")
        defaults = {"data": {...}, "model": {...}, "loss": {}}

        def build(self):                     # called under the variable device
            with keras.name_scope("generator"):
                ...
            return {"generator": g, "discriminator": d}

        def real_batch(self, batch_size):    # the real examples of one global batch
            ...
        def random_inputs(self, batch_size): # noise, masks: draw from self.rngs.noise
            ...
        def losses(self, batch, terms):      # one tower's shard -> {term: scalar}
            ...
        def sample(self, inputs):            # inputs from random_inputs -> outputs
            ...

Pictures and exports have defaults that suit image and 2-D point outputs; a task overrides
`sample_inputs`, `sample_outputs`, `picture` or `export` to do better (see
`stagegan.tasks.completion`). A task names its metrics (`metrics`) and computes none of
them (`stagegan.evaluation.registry`). What the trainer tells the task about the run it
serves is in `task.context` (`Context`).
"""

import copy
import dataclasses
import math
from functools import partial
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from stagegan.config import fields
from stagegan.config.overrides import check_keys
from stagegan.config.schema import batch_sizes
from stagegan.core import losses, regularisers
from stagegan.core.layers import pack, unpack
from stagegan.data.real import RealImages
from stagegan.data.sources import ImageSource, decide_channels, source_of
from stagegan.errors import ConfigError, first_line
from stagegan.evaluation import registry
from stagegan.runfolder import pictures

# What the memory check (`Task.check_memory`) counts: a parameter as float32 weights, gradient,
# two Adam slots and an EMA copy; an activation as float32 kept for the backward pass of G and
# D, twice over (the forward value and its gradient); a sample's float as float32, held by
# inputs, outputs, a picture and a copy while it is written.
PARAMETER_BYTES = 5 * 4
ACTIVATION_BYTES = 2 * 4 * 2
SAMPLE_BYTES = 4 * 4
BATCH_SIZE = 64  # an ordinary batch: a larger one is what a memory message blames first

# Philox counters of the random streams. Streams share the run seed as their key and start
# 2**64 blocks apart, so they never overlap. (`Generator.from_seed(s + 1)` would be
# `from_seed(s)` shifted by one block: seeds that differ by 1 would share their numbers.)
DATA_STREAM, NOISE_STREAM, AUGMENT_STREAM = 0, 1, 2


class RandomStreams:
    """The run's stateful random generators, checkpointed with everything else.

    `data` draws generated datasets and shuffles; `noise` draws latents and masks; `augment`
    draws the random numbers of `augment:` and bCR's transforms, so that turning them on or
    off leaves every latent, mask and batch of a seed as it was (an ablation changes one
    thing). All are drawn for the whole global batch, before it is split across towers, so
    the same seed gives the same training whatever the number of towers.
    """

    def __init__(self, seed):
        self.seed = seed
        self.data = make_generator(seed, DATA_STREAM)
        self.noise = make_generator(seed, NOISE_STREAM)
        self.augment = make_generator(seed, AUGMENT_STREAM)

    def trackables(self):
        return {"rng_data": self.data, "rng_noise": self.noise, "rng_augment": self.augment}


def float32(tensor):
    """A network's output as float32: under mixed precision (`devices.mixed_precision`)
    networks compute in 16 bits, and losses, samples and metrics work in float32."""
    return tf.cast(tensor, tf.float32)


def make_generator(seed, stream):
    """The philox generator of one stream of run seed `seed`."""
    return tf.random.Generator.from_key_counter(key=seed, counter=[0, stream], alg="philox")


class Sizes(NamedTuple):
    """What a task's networks and samples hold (`Task.sizes`)."""

    parameters: list
    activations: list
    sample: object  # floats; None: unknown yet; MEASURED: `measured_sample`'s, when needed
    sample_keys: tuple


MEASURED = "measured"  # a sample's floats: measured once the networks exist (`Task.sizes`)


def measured_sample(task):
    """The floats of one sample's inputs and outputs, measured (from a seed of its own: the
    run's streams are untouched); None before the networks are built, or for a task that
    cannot sample yet (its counts unchecked)."""
    if not task.networks:
        return None
    try:
        inputs, _ = task.sample_inputs(1, 0)
        arrays = [*inputs.values(), *task.sample_outputs(inputs).values()]
    except Exception:  # noqa: BLE001 - a task that cannot sample yet: its counts unchecked
        return None
    return sum(int(np.size(array)) for array in arrays)


class Description(NamedTuple):
    """What `plan` says of a task (`Task.describe`)."""

    networks: dict  # {scope: one line}
    inputs: list  # lines
    stages: dict  # {stage name: lines}


def sample_floats(task, sizes):
    """The floats of one of `task`'s samples, from its `Sizes` (measured now when it says
    `MEASURED`: only when a count is checked)."""
    return measured_sample(task) if sizes.sample is MEASURED else sizes.sample


@dataclasses.dataclass
class Context:
    """What the trainer tells a task about the run it serves: set before `build`, and while
    a stage's step traces. A task reads it; only the trainer writes it.

    Attributes:
        batch_size: the largest global batch a step draws (the run's `batch_size`, unless
            stages set their own), and `batch_key` its config key.
        batch_unit: the number every stage's global batch is a multiple of (their greatest
            common divisor): a stream serves batches of it, a step reads as many as it needs.
        host: where an in-memory data set is held and its batches gathered (the host CPU).
        reader: where a stream's iterator lives (None: the builder's device scope). Under
            `parameter_server` both are the chief: the one machine that needs the data.
        stage: the `config.Stage` whose step traces, else None.
        augmenter: that stage's `augment.Augmenter` while its step traces, else None.
        lecam: `regularisers.LeCam` when an update trains on `lecam`, else None.
        consistency: `regularisers.Consistency` when one trains on a `bcr` term, else None.
    """

    batch_size: int = None
    batch_key: str = "batch_size"
    batch_unit: int = None
    host: str = "/CPU:0"
    reader: object = None
    stage: object = None
    augmenter: object = None
    lecam: object = None
    consistency: object = None

    def augment(self, images, batch, side, m=1):
        """The images a discriminator is about to see, through the stage's augmentation
        (`augment:`; unchanged without one). `side` is "real" or "fake": which of the batch's
        random numbers to use (`batch["augment_real"]`, one row per image of the shard).
        `m`: the images are packs of m (`stagegan.core.layers.pack`); each image of a pack
        is augmented on its own."""
        if self.augmenter is None:
            return images
        uniforms = batch[f"augment_{side}"]
        if m == 1:
            return self.augmenter(images, uniforms)
        return pack(self.augmenter(unpack(images, m), uniforms), m)


class Task:
    """Base class of tasks. See the module docstring for the interface.

    Args:
        options (dict): `{"data": {...}, "model": {...}, "loss": {...}}` from the run config;
            merged over `defaults` and checked (unknown keys and wrong types are config errors).
        rngs (RandomStreams): the run's `RandomStreams`.
    """

    name = "task"
    loss_terms = ()
    # Quantities computed with a loss term and logged with it (not trained on), which
    # `until:` conditions can test: {loss term: (monitor, ...)}.
    monitor_terms = {}
    defaults = {"data": {}, "model": {}, "loss": {}}
    pack = 1  # samples per discriminator input (PacGAN's packing degree)
    _grows = False  # whether stages may set `resolution` and `fade_in` (progressive growing)
    # Optional capabilities, declared by the tasks that have them (the trainer and the doors
    # read this set; they never probe for members):
    #   "staged":  `real_batch` reads on the host (tf.data, host memory): the trainer draws
    #              it a step ahead into a buffer on the device (`stagegan.core.staging`) and
    #              calls `batch(batch_size, real=...)` with it; `real_batch` must then depend
    #              only on its reader and `rngs.data`. A uint8 `x` (images in [0, 255])
    #              reaches `losses` as float32 in [-1, 1], converted on each replica's device;
    #   "augments": `augment:` applies (the task passes D's inputs to `context.augment`);
    #   "images":  `real`, `source`, `classes`: real images from `data.source`
    #              (evaluations in image features, `--features selfsup`);
    #   "inputs":  `inputs_for_images`: `sample --input DIR` completes the user's images;
    #   "classes": `class_index`: samples of one asked class (`sample --class`);
    #   "latents": `sample_inputs` gives the generator's latents as `z` [N, D] from N(0, 1),
    #              which `sample --truncation` and `--interpolate` may replace;
    #   "mixture": `centres` and `std`: the 2-D Gaussian mixture of the `mixture` metrics.
    capabilities = frozenset()
    conditional = False  # whether the generator takes a class (`fake_y`) with its noise
    # The metrics `stagegan eval` computes: names declared in `stagegan.evaluation.registry`
    # (a family such as "realism", or a metric of one's own, `stagegan.register_metric`).
    metrics = ()

    def __init__(self, options, rngs):
        self.rngs = rngs
        self.options = merge_options(options, self.defaults)
        self.data = self.options["data"]
        self.model = self.options["model"]
        self.loss = self.options["loss"]
        regularisers.check_options(self.loss)
        self.networks = {}
        self.context = Context()

    def check_options(self, checks):
        """Check the options named by `checks`, `(key path, check)` pairs (`data.size`, a
        `stagegan.config.fields` check), in order: the first wrong one is reported."""
        for path, check in checks:
            section, name = path.split(".")
            check(self.options[section][name], path)

    def prepare(self, updates, device=None):
        """Make the state that the task's own schedule or loss terms need, before `build`
        (progressive growing's resolution and alpha), and refuse updates it cannot serve.

        The trainer calls it once, with every `config.Update` of the run, on the variable
        device (`device`) and outside any distribution strategy's scope, so the state is
        plain variables there, as `augment:`'s are (and the regularisers', in `context`).
        The default does nothing.

        Raises:
            ConfigError: an update the task cannot serve.
        """

    def begin_step(self, stage, stage_step):
        """Traced at the start of every step of `stage` (on the variable device), with its
        stage step (int64 tensor): state that follows the schedule (progressive growing's
        alpha). The default does nothing."""

    def build(self):
        """Build the networks; returns `{scope: keras.Model}`."""
        raise NotImplementedError

    def real_batch(self, batch_size):
        """One global batch of real examples: `{name: tensor}`."""
        raise NotImplementedError

    def random_inputs(self, batch_size):
        """The random inputs of one global batch (latents, masks): `{name: tensor}`."""
        return {}

    def batch(self, batch_size, real=None):
        """Everything one update application consumes: real examples (`real`, or
        `real_batch`'s) and random inputs (and bCR's random numbers, when it is on)."""
        real = self.real_batch(batch_size) if real is None else real
        batch = {**real, **self.random_inputs(batch_size)}
        if self.context.consistency is not None:
            batch.update(self.context.consistency.draw(self.rngs.augment, batch_size))
        return batch

    def losses(self, batch, terms):
        """Loss terms on one tower's shard. Must return at least the requested `terms`."""
        raise NotImplementedError

    def sample(self, inputs):
        """Generator outputs for `inputs` (as drawn by `random_inputs`)."""
        raise NotImplementedError

    def trackables(self):
        """Extra objects to checkpoint (e.g. a data iterator); the state of loss terms is the
        trainer's (`regularisers.term_state`)."""
        return {}

    def check(self, stages, batch_size, replicas):
        """Refuse what the task cannot serve, before it is built: stage settings it has no use
        for (`resolution`, `fade_in`: progressive growing, `model.arch: progressive` of the
        image GANs), and a packing degree that does not divide each replica's shard of the
        global batch (packs are formed inside each shard, so that no pack spans two
        devices)."""
        for stage in stages if not self._grows else ():
            for key in ("resolution", "fade_in"):
                if getattr(stage, key):
                    raise ConfigError(
                        f"{stage.key}.{key}",
                        "applies to progressive growing only (task unconditional with "
                        f"model.arch: progressive; this run: task {self.name}"
                        + (f", arch {self.model.get('arch')}" if self.model.get("arch") else "")
                        + ")",
                    )
        for key, size in batch_sizes(stages, batch_size).items():
            shard = size // replicas
            if shard % self.pack:
                raise ConfigError(
                    "model.pack",
                    f"must divide each replica's share of the batch ({key} {size} over "
                    f"{replicas} replica{'s' if replicas > 1 else ''} = {shard}). "
                    f"Received: {self.pack}",
                )

    # Memory ----------------------------------------------------------------------------------

    def sizes(self):
        """What the task's networks and samples hold, for the memory check before they are
        built: `Sizes(parameters, activations, sample, sample_keys)`.

        `parameters` and `activations` are lists of `(keys, count)`: the parameters that grow
        with the options `keys` (e.g. `(("model.width",), 2_000_000)`), and the floats that
        one example's forward pass keeps for the backward pass, by the options they grow
        with; networks that `model.generator`/`model.discriminator` replace are left out.
        `sample`: the floats one sample's inputs and outputs hold (for `samples.count`,
        `sample --num`, `eval.count` and `--count`), which grow with the options
        `sample_keys`; None: unknown yet. The default says nothing of the networks (nothing
        is checked) and measures one sample once the networks are built (`MEASURED`: by
        `measured_sample`, only when a count is checked).
        """
        return Sizes([], [], MEASURED, ())

    def check_memory(
        self,
        batch_size,
        counts=(),
        chunk=None,
        chunk_key="eval.batch_size",
        batch_key="batch_size",
        factors=None,
    ):
        """Refuse network sizes, a batch, and sample or evaluation counts whose memory
        would not fit (`stagegan.config.memory.check_memory`), before any is allocated.

        Args:
            batch_size (int): the global batch (the largest a stage draws), named `batch_key`.
            counts (Iterable[tuple]): `(key, count)` of the sample and evaluation counts to
                check, or `(key, count, default)` where the count's usual value is not the
                task's.
            chunk (int | None): samples per forward pass when sampling or evaluating
                (`eval.batch_size`, `--batch-size`), if they may be more than `batch_size`:
                the activations are those of the larger batch (up to the largest count),
                named `chunk_key`.
            factors (dict | None): `{key: (value, default)}`: other options each count was
                multiplied by (`project --restarts`), which the message may blame instead.

        Returns:
            (bool): Whether the counts were checked (False when a sample's size is not known
                yet: a task of the user's, before its networks are built).

        Raises:
            ConfigError: on the key that most makes the largest part that large: of the
                keys it grows with, the one furthest above its default (a model option,
                `data.size`, `batch_size`, a count's key).
        """
        from stagegan.config.memory import check_memory, format_count

        sizes = self.sizes()
        parameters, activations = sizes.parameters, sizes.activations
        counts = list(counts)
        if chunk is not None and counts:
            chunk = min(chunk, max(count for _, count, *_ in counts))
            if chunk > batch_size:
                batch_size, batch_key = chunk, chunk_key
        values = {batch_key: (batch_size, BATCH_SIZE)}
        for section in ("data", "model"):
            for name, default in self.defaults.get(section, {}).items():
                values[f"{section}.{name}"] = (self.options[section][name], default)
        usual = registry.usual_count(registry.task_metrics(self)) if counts else None
        for key, count, *given in counts:
            default = self.sample_count if key in ("samples.count", "--num") else usual
            values[key] = (count, given[0] if given else default)
        values.update(factors or {})
        total = sum(count for _, count in parameters)
        # (the keys a part grows with, its bytes, what it is)
        parts = [(keys, count * PARAMETER_BYTES, None) for keys, count in parameters]
        words = f"the activations of a batch of {format_count(batch_size)}"
        parts += [
            ((batch_key, *keys), batch_size * count * ACTIVATION_BYTES, words)
            for keys, count in activations
        ]
        per_sample = sample_floats(self, sizes) if counts else 0
        if per_sample is not None:
            parts += _sample_parts(counts, factors or {}, per_sample, sizes.sample_keys)

        if not parts:  # a task that says nothing of its sizes, before its networks exist
            return False

        def growth(key):
            value, default = values[key]
            if isinstance(value, list):  # a list of layers: its length
                value, default = len(value), len(default)
            if not (isinstance(default, int) and default > 0):
                return 1.0
            return value / default if value < 1e300 else math.inf  # an int beyond any float

        blamed = max(max(parts, key=lambda part: part[1])[0], key=growth)
        words = f"{format_count(total)} parameters with their gradients, optimizer slots and EMA"
        kinds = {words: total * PARAMETER_BYTES}  # the message lists one entry a kind of part
        for _, nbytes, words in parts[len(parameters) :]:
            kinds[words] = kinds.get(words, 0) + nbytes
        listed = [(blamed, nbytes, words) for words, nbytes in kinds.items()]
        check_memory(listed, {blamed: values[blamed][0]}, blamed)
        return per_sample is not None

    def decided_options(self):
        """`[(key, value, why)]`: the options given as `auto` and what the task made of them
        (logged at the start, recorded in the run's config.yaml, shown by `plan`)."""
        return []

    def describe(self, stages):
        """What `plan` says of the task, for a run of `stages`: `Description(networks,
        inputs, stages)`: `{scope: one line}` on the architecture of the task's own networks,
        lines on its random inputs beyond latents (completion's holes), and `{stage name:
        lines}` under each stage (progressive growing's resolution and alpha). The default:
        nothing to say."""
        return Description({}, [], {})

    # Samples ---------------------------------------------------------------------------------

    sample_count = 16  # samples in a training dump unless told otherwise

    def sample_inputs(self, count, seed, key="--num"):
        """Inputs for `count` samples, fixed by `seed` alone: `({name: array}, info)`; `key`
        names the count in errors (a task built on real images has only so many; `eval`
        passes its own key, `sample` the default).

        The default draws `random_inputs(count)` from a fresh noise stream of `seed`, leaving
        the run's own stream untouched. `info` is a small JSON-able dict (e.g. whether the
        inputs are held-out images) saved with the inputs.
        """
        saved = self.rngs.noise
        self.rngs.noise = make_generator(seed, NOISE_STREAM)
        try:
            inputs = self.random_inputs(count)
        finally:
            self.rngs.noise = saved
        return {name: np.asarray(value) for name, value in inputs.items()}, {}

    def sample_outputs(self, inputs):
        """Named output arrays for `inputs`; `samples` is what `export` saves."""
        return {"samples": np.asarray(self.sample(inputs))}

    def picture(self, inputs, outputs, info):
        """One uint8 RGB picture of the outputs: a grid of images, or a scatter of 2-D points."""
        samples = outputs["samples"]
        if samples.ndim == 4:
            return pictures.image_grid(samples)
        if samples.ndim == 2 and samples.shape[1] == 2:
            limit = 1.1 * float(np.abs(samples).max()) + 1e-3
            return pictures.scatter(samples, np.zeros((0, 2)), limit)
        raise ConfigError(
            "task",
            f"task {self.name!r} has no picture for samples of shape {list(samples.shape)}; "
            "override Task.picture",
        )

    def export(self, outputs):
        """The array `stagegan sample` writes to .npy: images in [0, 1], other samples as is."""
        samples = outputs["samples"]
        return (samples + 1.0) / 2.0 if samples.ndim == 4 else samples


def build_network(task, scope, default, inputs, output):
    """Build network `scope` under `keras.name_scope(scope)` and check its shapes.

    The builder is `model.<scope>` when the config names one (`package.module:function`),
    else `default`; either is called as `builder(task)` and returns a `keras.Model`.

    Args:
        scope: "generator" or "discriminator": also the variable scope.
        default: the task's own builder.
        inputs: the input shape without the batch axis, or a list of them.
        output: the expected output shape without the batch axis.
    """
    from stagegan.config.objects import call_user, load_object

    key = f"model.{scope}"
    path = task.model.get(scope)
    if path is None:
        builder = default
    else:
        builder = load_object(fields.object_path(path, key), key)
    label = path or f"the built-in {scope}"
    # The built-in networks are called plainly: a bug there keeps its traceback.
    call = (lambda f, *a, **k: f(*a, **k)) if path is None else partial(call_user, key, label)
    with keras.name_scope(scope):
        network = call(builder, task)
    if not isinstance(network, keras.Model):
        raise ConfigError(key, f"{label} returned {type(network).__name__}, not a keras.Model")
    several = isinstance(inputs, list)
    # stagegan's own networks: their shapes as Keras built them. A user's network is called on
    # zeros (a layer may declare a shape its `call` does not give).
    got = symbolic_output_shape(network, inputs if several else [inputs]) if path is None else None
    if got is None:
        zeros = [tf.zeros((1, *shape)) for shape in (inputs if several else [inputs])]
        try:
            result = call(network, zeros if several else zeros[0], training=False)
        except (ValueError, TypeError, tf.errors.InvalidArgumentError) as e:
            raise ConfigError(
                key, f"{label} cannot take inputs of shape {inputs}: {first_line(e)}"
            ) from None
        except ConfigError as e:
            raise ConfigError(
                key, f"{label} cannot take inputs of shape {inputs}: {e.message}"
            ) from None
        got = tuple(np.shape(result))[1:]
    if got != tuple(output) and not (tuple(output) == (1,) and got == ()):
        raise ConfigError(
            key, f"{label} maps {inputs} to shape {list(got)}; the task needs {list(output)}"
        )
    return network


def symbolic_output_shape(network, inputs):
    """The output shape (without the batch axis) of a functional `network` whose inputs (a
    tensor or a list) are fully defined and match `inputs` (shapes without the batch axis) and
    whose output is one fully defined tensor: Keras worked it out when the model was built,
    and a call would only say it again (0.04-0.13 s per build). None otherwise: a call decides."""
    model_inputs, outputs = getattr(network, "inputs", None), getattr(network, "outputs", None)
    single = isinstance(getattr(network, "_outputs_struct", None), keras.KerasTensor)
    if not model_inputs or not single or len(model_inputs) != len(inputs):
        return None
    if not isinstance(getattr(network, "_inputs_struct", None), keras.KerasTensor | list):
        return None
    for tensor, shape in zip(model_inputs, inputs, strict=True):
        if tuple(tensor.shape)[1:] != tuple(shape):
            return None
    got = tuple(outputs[0].shape)[1:]
    return None if None in got else got


def builds_own(task, scope):
    """Whether network `scope` is `task`'s own (no `model.<scope>` names a builder)."""
    return task.model.get(scope) is None


class ImageTask(Task):
    """A task on images from `data.source` (see `stagegan.data.sources`): builds the
    `ImageSource` and serves its global batches as `{"x": uint8 images}`, which `losses`
    receives as float32 in [-1, 1]. Subclasses call `build_source()` at the start of `build()`."""

    # batches read on the host: drawn a step ahead (stagegan.core.staging)
    capabilities = frozenset({"images", "staged"})
    source = None  # the `stagegan.data.sources.ImageSource`, once built
    _real = None  # `real`, once made
    recorded_clusters = None  # the run's own clusters (a resume, sample, eval; the trainer's)
    channels_decided = None  # with `data.channels: auto`: what decided it (`decide_channels`)

    def __init__(self, options, rngs):
        data = (options.get("data") or {}) if isinstance(options, dict) else {}
        if isinstance(data.get("channels"), str) and data["channels"] != "auto":
            raise ConfigError(
                "data.channels", f"must be 1, 3 or auto. Received: {data['channels']!r}"
            )
        if data.get("channels") == "auto":  # decided from the data before anything reads it
            merged = merge_options(
                {"data": {**data, "channels": 3}}, {"data": self.defaults["data"]}
            )
            channels, self.channels_decided = decide_channels(merged["data"])
            options = {**options, "data": {**data, "channels": channels}}
        super().__init__(options, rngs)

    def decided_options(self):
        if self.channels_decided is None:
            return []
        return [("data.channels", self.data["channels"], self.channels_decided)]

    def sizes(self):
        """An image's floats for a sample (subclasses with more inputs or outputs, and those
        that know their networks' sizes, say so)."""
        return Sizes([], [], self.data["size"] ** 2 * self.data["channels"], ("data.size",))

    def build_source(self):
        self.source = ImageSource(
            self.data,
            self.rngs.seed,
            self.context.batch_size,
            self.context.host,
            self.context.reader,
            self.recorded_clusters,
            self.context.batch_unit,
            self.context.batch_key,
        )

    @property
    def source_kind(self):
        """The `stagegan.data.sources.Source` of `data.source`."""
        return source_of(self.data, self.recorded_clusters)

    @property
    def classes(self):
        """The class names of labelled data (`data.labels`), or None."""
        return self.source.classes

    @property
    def real(self):
        """The `stagegan.data.real.RealImages` that samples and metrics compare with."""
        if self._real is None:
            self._real = RealImages(self.data, self.rngs.seed, self.recorded_clusters)
        return self._real

    def real_batch(self, batch_size):
        """`{"x": uint8 images}` (and `"y"`): the trainer stages them on the draw device and
        each replica converts its shard to float32 in [-1, 1] before `losses` sees it."""
        return self.source.draw(batch_size, self.rngs.data)

    def trackables(self):
        return self.source.trackables()


# The generator terms that pair consecutive samples of one class (`losses.mode_seeking`).
MODE_SEEKING = ("mode_seeking", "mode_seeking_pairs")


def adversarial_losses(task, batch, terms):
    """`d_loss`, `g_loss`, `gradient_penalty`, `r1`, `r2`, `mode_seeking`, `mode_seeking_pairs`,
    `lecam` and the `bcr` terms (`stagegan.core.regularisers`) of a generator/discriminator
    pair whose discriminator sees `task.pack` samples at once (1: one sample, no packing).

    Real and generated samples are packed separately (`stagegan.core.layers.pack`), so every pack is
    all real or all generated. The gradient penalty interpolates whole packs (one weight per
    pack: the first of its samples' `epsilon`, so it does not depend on the number of towers)
    and the penalties take gradient norms with respect to the whole pack. A relativistic
    loss (`rpgan`) pairs the i-th real pack with the i-th generated one, in the generator's
    loss too (which then scores the real packs as well).

    A conditional task (`task.conditional`) generates from `[z, fake_y]` and its
    discriminator takes `[pack, the pack's classes]`: real images with their classes `y`,
    generated ones with `fake_y`; R1 and the gradient penalty use the real classes, R2 the
    generated ones. When `mode_seeking` (or `mode_seeking_pairs`) is requested, consecutive
    samples (2k, 2k + 1) are generated with the class of the first (MSGAN's two latents of one
    class), for every term of the step, and the term compares each pair
    (`losses.mode_seeking`, `losses.mode_seeking_pairs`).

    Args:
        task: has `generator`, `discriminator`, `pack`, `loss` (its `adversarial`), `d_loss`
            and `g_loss`.
        batch: one shard: real `x`, latents `z`, interpolation weights `epsilon` (and the
            classes `y` and `fake_y` of a conditional task).
        terms: the requested loss terms.
    """
    m, x, out = task.pack, batch["x"], {}
    conditional = task.conditional
    seeking = [term for term in MODE_SEEKING if term in terms]
    if conditional and seeking:
        batch = {**batch, "fake_y": tf.repeat(batch["fake_y"][0::2], 2)}

    def critic_of(labels, side):
        # Augmentation (`augment:`) comes first, so penalties differentiate with respect to
        # the un-augmented images, as ADA's R1 does.
        seen = lambda packed: task.context.augment(packed, batch, side, m)
        if not conditional:
            return lambda packed: float32(task.discriminator(seen(packed), training=True))
        packed_labels = tf.reshape(labels, [-1, m])
        return lambda packed: float32(
            task.discriminator([seen(packed), packed_labels], training=True)
        )

    real_critic = critic_of(batch.get("y"), "real")
    fake_critic = critic_of(batch.get("fake_y"), "fake")
    # Terms that score real and (constant) generated samples with the discriminator.
    scored = {"d_loss", *regularisers.TERMS, *regularisers.LECAM_MONITORS} & set(terms)
    if {"g_loss", "gradient_penalty", "r2", *seeking} & set(terms) or scored:
        latent = [batch["z"], batch["fake_y"]] if conditional else batch["z"]
        fake = float32(task.generator(latent, training=True))
    if scored:
        held = tf.stop_gradient(fake)
        real_logits = real_critic(pack(x, m))
        fake_logits = fake_critic(pack(held, m))
        scorers = (lambda s: real_critic(pack(s, m)), lambda s: fake_critic(pack(s, m)))
        out.update(
            regularisers.discriminator_terms(
                task, terms, batch, (real_logits, fake_logits), scorers, (x, held)
            )
        )
    if "d_loss" in terms:
        out["d_loss"] = task.d_loss(real_logits, fake_logits)
        out.update(task.d_accuracy(real_logits, fake_logits, terms))
    if "g_loss" in terms:
        generated = fake_critic(pack(fake, m))
        if losses.relativistic(task.loss["adversarial"]):
            paired = real_logits if scored else real_critic(pack(x, m))
            out["g_loss"] = task.g_loss(generated, paired)
        else:
            out["g_loss"] = task.g_loss(generated)
    if {"gradient_penalty", "r1", "r2"} & set(terms):
        generated = fake if {"gradient_penalty", "r2"} & set(terms) else None  # R1 alone: none
        critics = (real_critic, fake_critic)
        out.update(_penalties(terms, critics, x, generated, batch.get("epsilon"), m))
    for term in seeking:
        out[term] = getattr(losses, term)(fake, batch["z"])
    return out


def _penalties(terms, critics, x, fake, epsilon, m):
    """The requested gradient penalties of `adversarial_losses`, on the packs of `x`, `fake`."""
    (real_critic, fake_critic), out = critics, {}
    real, fake = pack(x, m), None if fake is None else pack(fake, m)
    if "gradient_penalty" in terms:
        epsilon = tf.reshape(epsilon, [-1, m])[:, 0]  # one weight per pack
        out["gradient_penalty"] = losses.gradient_penalty(real_critic, real, fake, epsilon)
    if "r1" in terms:
        out["r1"] = losses.r1_penalty(real_critic, real)
    if "r2" in terms:
        out["r2"] = losses.r2_penalty(fake_critic, fake)
    return out


def merge_options(options, defaults):
    """Merge the config's task options over `defaults`, checking names and types.

    A default of None accepts any value; a float default accepts ints; otherwise the value must
    have the default's type (null included).
    """
    merged = {}
    for section, section_defaults in defaults.items():
        given = options.get(section) or {}
        for key, value in given.items():  # key by key: the first wrong one is reported
            check_keys((key,), section_defaults, section)
            like(section_defaults[key])(value, f"{section}.{key}")
        merged[section] = {**copy.deepcopy(section_defaults), **given}
    for section in options:
        if section not in defaults and options[section]:
            raise ConfigError(section, f"task takes no {section!r} options")
    return merged


def like(default):
    """The check of a task option whose default is `default`: a value of its type (an int
    for a float; true or false only for a bool); None: any value, the task's to check."""

    def check(value, key):
        if isinstance(default, bool) or isinstance(value, bool):
            ok = isinstance(default, bool) and isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float))
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ConfigError(key, f"must be {type(default).__name__}. Received: {value!r}")
        return value

    return fields.as_given if default is None else check


def choice(options, section, key, allowed):
    """`options[key]`, checked to be one of `allowed` (`fields.choice`)."""
    return fields.choice(allowed)(options[key], f"{section}.{key}")


def positive(options, section, key):
    """`options[key]`, checked to be above 0 (`fields.positive`)."""
    return fields.positive(options[key], f"{section}.{key}")


def _sample_parts(counts, factors, per_sample, sample_keys):
    """The memory parts of samples held at once: `(keys, bytes, words)` per count of
    `counts` (`(key, count, ...)`), multiplied by the `factors`' values (`{key: (value,
    default)}`), each sample `per_sample` floats."""
    from stagegan.config.memory import format_count

    parts = []
    for key, count, *_ in counts:
        held = count
        for value, _ in factors.values():
            held *= value
        named = " x ".join((key, *factors))
        words = f"{format_count(held)} samples held at once ({named})"
        parts.append(((key, *factors, *sample_keys), held * per_sample * SAMPLE_BYTES, words))
    return parts

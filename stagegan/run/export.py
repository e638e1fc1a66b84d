"""`stagegan export`: a run's generator as a file that plain TensorFlow, Keras or the TFLite
interpreter loads, without stagegan.

    export_generator(trainer, "out/", "savedmodel")
    # later, anywhere with TensorFlow (keep the loaded object: it owns the weights):
    #   model = tf.saved_model.load("out/saved_model"); images = model.serve(z)

The exported model takes the generator's own inputs (a latent `z` [N, D], and a class index
`y` [N] int32 for a class-conditional run; an image with its hole and mask for completion)
and gives uint8 images [N, S, S, C] (`round((x + 1) * 127.5)`, clipped to 0..255: the same
levels as `sample`'s pictures), or the raw outputs for a task whose samples are not images
(mog2d's points, float32). The EMA weights are exported when the run keeps an EMA.

Formats:
    keras       DIR/generator.keras: `keras.saving.load_model(path)(z)`
    savedmodel  DIR/saved_model/: `model = tf.saved_model.load(path)`, then `model.serve(z)`
                (`model.serve([z, y])` for a class-conditional one; the signature
                `serving_default` takes them by name)
    tflite      DIR/generator.tflite: `tf.lite.Interpreter(model_path=path)`

A network of the user's own (`model.generator: package.module:function`) is exported as it
is; loading a `.keras` file of one that uses layers of its own needs their module.
"""

import contextlib
import json
import os
import shutil
from pathlib import Path

import keras
import tensorflow as tf

from stagegan.errors import ConfigError, WriteError, first_line

FORMATS = ("keras", "savedmodel", "tflite")
FILES = {"keras": "generator.keras", "savedmodel": "saved_model", "tflite": "generator.tflite"}
RECORD = "export.json"


def check_format(name, key="--format"):
    if name not in FORMATS:
        raise ConfigError(key, f"must be one of {', '.join(FORMATS)}. Received: {name!r}")
    return name


def servable(trainer):
    """The generator wrapped for serving: its inputs, and uint8 images (or the raw outputs
    of a task without images) as its output."""
    generator = trainer.networks["generator"]
    inputs = getattr(generator, "inputs", None)
    if not inputs:
        return Served(trainer)
    named = [keras.Input(batch_shape=i.shape, dtype=i.dtype, name=n) for i, n in
             zip(inputs, input_names(trainer), strict=True)]  # fmt: skip
    out = generator(named if len(named) > 1 else named[0], training=False)
    out = keras.ops.cast(out, "float32")
    if "images" in trainer.task.capabilities:
        out = keras.ops.cast(keras.ops.clip(keras.ops.round((out + 1.0) * 127.5), 0, 255), "uint8")
    return keras.Model(named if len(named) > 1 else named[0], out, name="exported_generator")


class Served(tf.Module):
    """A generator that is not a functional Keras model (progressive growing's, which draws
    at the run's current resolution and alpha, variables of the run) as a `tf.Module` with a
    `serve` function: exported as a SavedModel (or TFLite); a `.keras` file is refused, its
    layers being stagegan's own."""

    def __init__(self, trainer):
        super().__init__(name="exported_generator")
        task = trainer.task
        self.generator = trainer.networks["generator"]
        self.state = list(task.trackables().values())  # tracked: the resolution and alpha
        self.images = "images" in task.capabilities
        specs = [tf.TensorSpec([None, task.model["latent_dim"]], tf.float32, name="z")]
        if getattr(task, "conditional", False):
            specs.append(tf.TensorSpec([None], tf.int32, name="y"))
        self.inputs = specs
        self.serve = tf.function(self._serve, input_signature=specs)
        out = self.serve.get_concrete_function().structured_outputs
        self.output = out

    def _serve(self, *inputs):
        out = self.generator(list(inputs) if len(inputs) > 1 else inputs[0], training=False)
        out = tf.cast(out, tf.float32)
        if self.images:
            out = tf.cast(tf.clip_by_value(tf.round((out + 1.0) * 127.5), 0, 255), tf.uint8)
        return out

    def save(self, path):
        raise ConfigError(
            "--format",
            "a progressive generator (model.arch: progressive) exports as savedmodel or "
            "tflite: its layers are stagegan's own, so a .keras file would not load without it",
        )

    def export(self, path, format, verbose=False):
        del format, verbose
        tf.saved_model.save(self, str(path), signatures={"serving_default": self.serve})


def input_names(trainer):
    """The exported inputs' names: `z` and `y` for a latent (and class) generator, else the
    generator's own inputs as `input_0`, `input_1`, ..."""
    generator = trainer.networks["generator"]
    if not getattr(generator, "inputs", None):  # a `Served` generator: z (and y)
        return ["z", "y"][: 2 if trainer.task.conditional else 1]
    count = len(generator.inputs)
    if "latents" in trainer.task.capabilities:
        return ["z", "y"][:count]
    return [f"input_{i}" for i in range(count)]


def export_generator(trainer, output, fmt, ema=True, run=None):
    """Write the trainer's generator to the new folder `output` in format `fmt`; returns the
    path of the exported file. The folder is written as `output.partial-<pid>` and renamed
    when complete, so a failed export leaves nothing.

    Raises:
        ConfigError: an unknown format, an `output` that exists and is not empty, a run
            without a generator.
        WriteError: the folder cannot be written.
    """
    from stagegan.run.reading import check_no_ema

    check_no_ema(trainer, ema)
    check_format(fmt)
    if "generator" not in trainer.networks:
        raise ConfigError("--run", f"task {trainer.task.name!r} has no generator network")
    output = Path(output)
    partial = output.with_name(f"{output.name}.partial-{os.getpid()}")
    use_ema = ema and trainer.ema is not None
    swapped = trainer.ema.swapped() if use_ema else contextlib.nullcontext()
    try:
        partial.mkdir(parents=True)
        with swapped:
            model = servable(trainer)
            path = partial / FILES[fmt]
            if fmt == "keras":
                model.save(path)
            else:
                saved = path if fmt == "savedmodel" else partial / "saved_model"
                model.export(saved, format="tf_saved_model", verbose=False)
                if fmt == "tflite":
                    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
                    path.write_bytes(converter.convert())
                    shutil.rmtree(saved)
        record = {
            "run": None if run is None else str(run),
            "step": trainer.step_count,
            "ema": use_ema,
            "format": fmt,
            "file": FILES[fmt],
            "inputs": {
                name: {"shape": list(i.shape), "dtype": dtype_name(i.dtype)}
                for name, i in zip(input_names(trainer), model.inputs, strict=True)
            },
            "output": {"shape": list(model.output.shape), "dtype": dtype_name(model.output.dtype)},
        }
        (partial / RECORD).write_text(json.dumps(record, indent=1) + "\n")
        if output.exists():  # an empty folder (checked): the files move in
            _into_empty(partial, output)
        else:
            os.replace(partial, output)
    except ConfigError:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise WriteError("--output", f"cannot write {output}: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - a network TFLite cannot convert: one line
        shutil.rmtree(partial, ignore_errors=True)
        raise ConfigError("--format", f"cannot export as {fmt}: {first_line(e)[:300]}") from None
    return output / FILES[fmt]


def dtype_name(dtype):
    """ "float32" for a Keras tensor's dtype (a string) or a TensorFlow one (`tf.float32`)."""
    return getattr(dtype, "name", str(dtype))


def _into_empty(partial, output):
    for child in partial.iterdir():
        os.replace(child, output / child.name)
    partial.rmdir()

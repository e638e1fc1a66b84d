"""Sample dumps during training: `RUN/samples/`.

The inputs behind every dump (latents, or real images with their holes) are drawn once, from
`samples.seed`, at the start of the run and saved as `inputs.npz`; a resumed run reloads them,
so every picture of a run shows the same inputs. Each dump is a PNG named with the global step
and the stage, and one line in `manifest.jsonl`:

    {"file": "step00001000-completion.png", "step": 1000, "stage": "completion",
     "seed": 0, "ema": false, "count": 16}
"""

import json
import re
import zipfile

import numpy as np

from stagegan.config.files import check_regular
from stagegan.config.memory import format_bytes, memory_limit
from stagegan.errors import ConfigError
from stagegan.runfolder import pictures
from stagegan.runfolder.logs import append_jsonl

INPUTS = "inputs.npz"
MANIFEST = "manifest.jsonl"


def chunk_size(config):
    """Images per forward pass when evaluating or sampling (`eval.batch_size`, else the run's
    `batch_size`), so their peak memory does not grow with the number of images."""
    if config.eval is not None and config.eval.batch_size is not None:
        return config.eval.batch_size
    return config.batch_size


def stage_slug(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def save_inputs(path, inputs, info, seed):
    """Save fixed sample inputs with their seed and info (atomically)."""
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **inputs, __info__=json.dumps({"seed": seed, **info}))
    tmp.replace(path)


def load_inputs(path):
    """`(inputs, info)` saved by `save_inputs`; info includes the seed."""
    with np.load(path) as archive:
        info = json.loads(str(archive["__info__"]))
        inputs = {k: archive[k] for k in archive.files if k != "__info__"}
    return inputs, info


def stored_bytes(path):
    """The bytes the arrays of an `.npz` file take once loaded, read from their headers
    (a compressed member can hold far more than the file's size)."""
    total = 0
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read_header(f)
            total += int(np.prod(shape, dtype=object)) * dtype.itemsize
    return total


def read_inputs(path):
    """`load_inputs`, with an unreadable file a ConfigError naming it (checked on resume
    before anything in the run folder changes): a regular file only, whose arrays fit in
    memory."""
    check_regular(path, str(path), "sample inputs file")
    try:
        limit, where = memory_limit()
        size = stored_bytes(path)
        if limit is not None and size > limit // 2:
            raise ConfigError(
                str(path),
                f"the run's fixed sample inputs would take {format_bytes(size)} ({where}); "
                "move the file away to draw new ones",
            )
        return load_inputs(path)
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        raise ConfigError(
            str(path),
            "the run's fixed sample inputs are unreadable; move the file away to draw new ones "
            "(pictures before and after will then show different inputs)",
        ) from None


def chunked_outputs(trainer, inputs, batch_size, ema=True):
    """`trainer.sample_outputs(inputs)`, run `batch_size` inputs at a time (so the networks'
    activations never hold more than a batch), the output arrays concatenated."""
    count = len(next(iter(inputs.values())))
    pieces = []
    for start in range(0, count, batch_size):
        chunk = {k: v[start : start + batch_size] for k, v in inputs.items()}
        pieces.append(trainer.sample_outputs(chunk, ema=ema))
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}


class SampleDumper:
    """Writes the run's sample pictures and their manifest.

    Args:
        trainer: the `Trainer`.
        run_dir: the run folder.
        config: a `config.SamplesConfig`.
    """

    def __init__(self, trainer, run_dir, config):
        self.trainer = trainer
        self.config = config
        self.folder = run_dir / "samples"
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / INPUTS
        if path.exists():
            self.inputs, self.info = read_inputs(path)
        else:
            count = config.count or trainer.task.sample_count
            inputs, info = trainer.task.sample_inputs(count, config.seed)
            save_inputs(path, inputs, info, config.seed)
            self.inputs, self.info = inputs, {"seed": config.seed, **info}
        self.ema = config.ema and trainer.ema is not None

    def due(self, step, stage_done):
        """Whether global step `step` (steps completed) gets a dump."""
        return stage_done or (self.config.every > 0 and step % self.config.every == 0)

    def dump(self, step, stage_name):
        """Sample, write the PNG and its manifest line; returns `(path, picture)`."""
        chunk = chunk_size(self.trainer.config)
        outputs = chunked_outputs(self.trainer, self.inputs, chunk, self.ema)
        picture = self.trainer.task.picture(self.inputs, outputs, self.info)
        ema = ", EMA" if self.ema else ""
        picture = pictures.with_title(picture, f"step {step:,}, stage {stage_name}{ema}")
        name = f"step{step:08d}-{stage_slug(stage_name)}.png"
        path = pictures.write_png(picture, self.folder / name)
        record = {
            "file": name,
            "step": step,
            "stage": stage_name,
            "seed": self.info["seed"],
            "ema": self.ema,
            "count": len(next(iter(self.inputs.values()))),
        }
        append_jsonl(self.folder / MANIFEST, record)
        return path, picture

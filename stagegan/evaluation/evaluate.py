"""Evaluation of a run: the task's metrics on a restored (or live) trainer.

    evaluation = Evaluation(trainer, run_dir, count=None, seed=0)
    result = evaluation.run()        # {"step": ..., "metrics": {name: value}}

The task names what to measure (`Task.metrics`, declared in `stagegan.evaluation.registry`,
the built-in families computed in `stagegan.evaluation.builtin`); this module gives the
metrics batched sampling and the run's stage-end checkpoints (for baselines such as the
reconstruction-only stage). The feature extractors for FID and KID are in
`stagegan.evaluation.features`; the maths lives in `stagegan.evaluation.metrics` and
`stagegan.evaluation.realism`.
"""

import contextlib
import logging
import math
import os
import time

import numpy as np
import tensorflow as tf

from stagegan.config.objects import call_user, load_object
from stagegan.core.variables import network_key
from stagegan.errors import ConfigError, WriteError
from stagegan.evaluation import memorisation as memo
from stagegan.evaluation import metrics, realism, registry
from stagegan.evaluation.features import (
    INCEPTION,
    SELFSUP,
    SHAPES,
    check_features,
    default_features,
    describe_features,
    load_extractor,
)
from stagegan.evaluation.memorisation import AUTO_IMAGES
from stagegan.runfolder.dirs import RunFolder
from stagegan.runfolder.pictures import write_png
from stagegan.runfolder.samples import chunk_size, chunked_outputs


def load(metric):
    """`metric`'s function (a built-in family's is named by its path, imported when first
    used)."""
    compute = metric.compute
    return load_object(compute, "eval.metrics") if isinstance(compute, str) else compute


log = logging.getLogger("stagegan")


class Evaluation:
    """One evaluation of a trainer's current weights.

    Args:
        trainer: a built `training.Trainer`, holding the weights to evaluate.
        run_dir: the run folder (its checkpoints give baselines), or None.
        count: samples to evaluate; None: the most its metrics usually take
            (`registry.usual_count`), or all the real images of an image task with fewer.
        seed: fixes the inputs (latents, held-out images, masks), so evaluations of different
            checkpoints see the same inputs.
        features: the feature extractor for FID/KID and completion's realism metric (see
            `load_extractor`), or None for the source's default (`default_features`).
        features_key: the config key or flag that named `features` (for errors).
        count_key: the config key or flag that named `count` (for errors).
        ema: sample from the EMA weights when the run keeps an EMA.
        batch_size: images per forward pass (None: `runfolder.samples.chunk_size`, the run's batch).
        memorise: compare the samples with the training images
            (`stagegan.evaluation.memorisation`): True, False, or "auto" (`wants_memorisation`).
        nearest: a PNG path for the picture of samples beside their nearest training images
            (implies `memorise`), or None.
    """

    def __init__(
        self,
        trainer,
        run_dir,
        count=None,
        seed=0,
        features=None,
        features_key="--features",
        count_key="--count",
        batch_key="--batch-size",
        ema=True,
        batch_size=None,
        memorise=False,
        nearest=None,
    ):
        self.trainer = trainer
        self.task = trainer.task
        self.run_dir = run_dir
        self._count = count
        self.count_key, self.batch_key = count_key, batch_key
        self.seed = seed
        self.features_named = features is not None
        data = self.task.data
        self.features_spec = features or (default_features(data) if "source" in data else INCEPTION)
        self.features_key = features_key
        self.ema = ema and trainer.ema is not None
        self.batch_size = batch_size or chunk_size(trainer.config)
        self.memorise = True if nearest is not None else memorise
        self.nearest = nearest
        self._extractor = self._pools = self._samples = None
        # the task's own metrics, then those the run adds (`registry.settle`)
        self.metrics = registry.task_metrics(self.task) + list(trainer.added_metrics)

    @property
    def count(self):
        if self._count is None:
            self._count = registry.usual_count(self.metrics)
            if "images" in self.task.capabilities:  # fewer when there are fewer
                self._count = self.task.real.default_count(self._count)
        return self._count

    def run(self):
        """Evaluate; returns `{"step", "ema", "count", "seconds", "metrics"}`."""
        self.check()
        start = time.perf_counter()
        self._samples = None  # the weights may have changed since the last run
        values = {}
        for metric in self.metrics:
            if metric.gives:  # a built-in family, called plainly: a bug keeps its traceback
                values.update(load(metric)(self))
            else:
                values[metric.name] = self._compute(metric)
        self._samples = None
        return {
            "step": self.trainer.step_count,
            "ema": self.ema,
            "seed": self.seed,
            "seconds": round(time.perf_counter() - start, 3),
            "metrics": values,
        }

    def _compute(self, metric):
        """A metric's value: a finite number, or None (no value this time). Errors name
        `eval.metrics` for a metric the run adds, `task` for one the task names."""
        own = metric.name in self.task.metrics
        key, label = "task" if own else "eval.metrics", f"metric {metric.name!r}"
        value = call_user(key, label, load(metric), self)
        if value is None:
            return None
        if isinstance(value, np.generic | np.ndarray) and np.size(value) == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"{label} returned {value!r}, not a number or None")
        return float(value) if math.isfinite(value) else None

    def samples(self):
        """What the trainer generates from this evaluation's inputs (`count` of them, fixed by
        `seed`; images in [-1, 1] for an image task), drawn once per `run` (for added
        metrics, see `stagegan.evaluation.registry`)."""
        if self._samples is None:
            inputs, _ = self.task.sample_inputs(self.count, self.seed, self.count_key)
            self._samples = self.sample_outputs(inputs)["samples"]
        return self._samples

    def real_images(self):
        """`count` real images in [-1, 1] (held out where the source has a split), fixed by
        `seed`: the ones FID compares with."""
        if "images" not in self.task.capabilities:
            raise ConfigError("eval.metrics", f"task {self.task.name!r} has no real images")
        images, _ = self.task.real.draw(self.count, self.seed, self.count_key)
        return images

    def check(self):
        """Load what the evaluation will need up front (feature extractors, enough real
        images), so a problem shows before training starts or a run folder exists.

        Raises:
            ConfigError: a task without metrics, too few samples for one, features named
                for metrics that take none, a feature extractor that does not load.
        """
        if not self.metrics:
            raise ConfigError(
                "task",
                f"task {self.task.name!r} names no metrics (Task.metrics: metrics declared "
                "with @stagegan.register_metric; or eval.metrics)",
            )
        if self._count is not None or self.batch_size != chunk_size(self.trainer.config):
            # asked for (the defaults were checked with the run's config)
            counts = [(self.count_key, self.count)]
            batch_size = self.trainer.config.batch_size
            self.task.check_memory(batch_size, counts, self.batch_size, self.batch_key)
        if self.features_named and not self.uses_features:
            raise ConfigError(
                self.features_key,
                f"task {self.task.name!r} computes no metric in image features (it takes none). "
                f"Received: {self.features_spec!r}",
            )
        if self.memorise is True and not {"images", "latents"} <= self.task.capabilities:
            raise ConfigError(
                "--nearest" if self.nearest is not None else "--memorisation",
                f"compares generated images with the training images; task {self.task.name!r} "
                "does not draw images from latents",
            )
        if self.uses_features:
            self._load_extractor()
            if "images" in self.task.capabilities:  # a first call, on two blank images
                side, channels = self.task.size, self.task.data["channels"]
                self.features(np.zeros((2, side, side, channels), np.float32))
        registry.check_count(self.metrics, self.count, self.count_key)
        if "images" in self.task.capabilities:
            self.task.real.checked_pool(self.count, self.count_key)

    @property
    def uses_features(self):
        """Whether a metric is computed in image features: one that always is, or one that
        may be (`Metric.features`) when features are named or the source's own need no
        download (`shapes`)."""
        kinds = {metric.features for metric in self.metrics}
        if "always" in kinds:
            return True
        offline = "images" in self.task.capabilities and self.task.source_kind.features == SHAPES
        return "optional" in kinds and (self.features_named or offline)

    # Helpers for tasks ------------------------------------------------------------------------

    def sample_outputs(self, inputs):
        """`trainer.sample_outputs` over `inputs` in chunks of `batch_size`."""
        return chunked_outputs(self.trainer, inputs, self.batch_size, self.ema)

    def last_stage_with_only(self, terms, scope):
        """The last stage whose updates use only loss `terms` and that trains `scope`/."""
        found = None
        for stage in self.trainer.config.stages:
            used = {term for update in stage.updates for term, _ in update.loss}
            trains = any(p.startswith(scope + "/") for u in stage.updates for p in u.train)
            if used and used <= set(terms) and trains:
                found = stage
        return found

    def stage_checkpoint(self, stage):
        """The path of `stage`'s (last) stage-end checkpoint in this run, or None."""
        if self.run_dir is None:
            return None
        store = RunFolder(self.run_dir).checkpoints()
        found = [e for e in store.entries() if f"stage_end:{stage.name}" in e["tags"]]
        return store.path_of(found[-1]) if found else None  # an extended stage ends later

    def stage_end_step(self, stage):
        """The global step at which `stage` ends."""
        return self.trainer.schedule.stage_end(self.trainer.config.stages.index(stage))

    @contextlib.contextmanager
    def weights_from(self, path):
        """Within the block the networks (and EMA) hold the weights of checkpoint `path`;
        everything else (optimizers, step, random state) is untouched, and the weights are
        restored afterwards."""
        trainer = self.trainer
        objects = {network_key(scope): net for scope, net in trainer.networks.items()}
        variables = [w for net in trainer.networks.values() for w in net.weights]
        if trainer.ema is not None:
            objects.update(trainer.ema.trackables())
            variables += trainer.ema.averages
        saved = [tf.identity(tf.convert_to_tensor(v)) for v in variables]
        try:
            tf.train.Checkpoint(**objects).read(path).expect_partial()
            yield
        finally:
            for variable, value in zip(variables, saved, strict=True):
                variable.assign(value)

    def features(self, images):
        """Feature vectors [N, D] of images [N, S, S, C] in [-1, 1], checked (one row an
        image, numbers, finite) before any metric is computed from them.

        Raises:
            ConfigError: on the features' key when the extractor raises or returns
                something else.
        """
        extractor = self._load_extractor()
        key, label = self.features_key, self.features_name
        out = []
        for start in range(0, len(images), self.batch_size):
            batch = images[start : start + self.batch_size]
            out.append(check_features(call_user(key, label, extractor, batch), len(batch), key))
        features = np.concatenate(out)
        if not np.isfinite(features).all():
            bad = int((~np.isfinite(features).all(axis=1)).sum())
            raise ConfigError(
                key,
                f"{label} gave non-finite features (NaN or Inf) for {bad} of {len(images)} images",
            )
        return features

    def wants_memorisation(self):
        """Whether this evaluation compares samples with training images: asked for (True),
        or `"auto"` on a folder or npz source whose training and held-out images number at
        most `AUTO_IMAGES` (every one compared, at little cost)."""
        if self.memorise != "auto" or "images" not in self.task.capabilities:
            return self.memorise is True
        kind = self.task.source_kind
        if kind.streamed or kind.held_out and not self.task.data.get("holdout"):
            return False  # a stream has no count; shapes and keras sets are large
        pools = self.memorisation_pools()
        return sum(pool.size for pool in pools) <= AUTO_IMAGES

    def memorisation_pools(self):
        """`[training]` or `[training, held-out]` pools of real images (made once)."""
        if self._pools is None:
            task = self.task
            most = memo.reference_count(None, self.image_bytes)
            training = task.source_kind.training_pool(task.rngs.seed, most)
            pool = task.real.pool(self.count)
            self._pools = [training, pool] if pool.held_out else [training]
        return self._pools

    def memorisation(self, task, fake, fake_features):
        """`stagegan.evaluation.memorisation`'s numbers (and picture, with `nearest`), under
        `memorisation/`; nothing unless `wants_memorisation`."""
        if not self.wants_memorisation():
            return {}
        rng, references = np.random.default_rng(self.seed), []
        for pool in self.memorisation_pools():
            images = memo.draw(pool, memo.reference_count(pool, self.image_bytes), rng)
            references.append(memo.References(images, self.uint8_features(images)))
        training, held = references[0], references[1] if len(references) > 1 else None
        numbers, found = memo.memorisation(fake, fake_features, training, held)
        if self.nearest is not None:
            self.write_nearest(memo.nearest_picture(fake, training, held, found))
        return {f"memorisation/{name}": value for name, value in numbers.items()}

    @property
    def image_bytes(self):
        """Bytes of one uint8 image of the task."""
        return self.task.size**2 * self.task.data["channels"]

    def write_nearest(self, picture):
        """Write `--nearest`'s picture, unless a file appeared there since the command began."""
        if os.path.lexists(self.nearest):
            raise WriteError("--nearest", f"{self.nearest} appeared meanwhile; not overwritten")
        try:
            write_png(picture, self.nearest)
        except OSError as e:
            message = f"cannot write {self.nearest}: {e.strerror or e}"
            raise WriteError("--nearest", message) from None

    def uint8_features(self, images):
        """`features` of uint8 images, converted a batch at a time."""
        step = self.batch_size
        out = [
            self.features(images[i : i + step].astype(np.float32) / 127.5 - 1.0)
            for i in range(0, len(images), step)
        ]
        return np.concatenate(out)

    def distances(self, real_features, fake_features):
        """`{"fid", "kid", "kid_std", "precision", "recall", "density", "coverage"}` between
        two feature sets; the neighbourhood sizes (3 for precision and recall, 5 for density
        and coverage) shrink to one less than the smaller set's size."""
        kid, kid_std = metrics.kernel_inception_distance(
            real_features, fake_features, seed=self.seed
        )
        largest_k = min(len(real_features), len(fake_features)) - 1
        return {
            "fid": metrics.frechet_distance(real_features, fake_features),
            "kid": kid,
            "kid_std": kid_std,
            **realism.precision_recall(real_features, fake_features, k=min(3, largest_k)),
            **realism.density_coverage(real_features, fake_features, k=min(5, largest_k)),
        }

    def c2st(self, real_images, fake_images, local=False):
        """`{"c2st", "c2st_std"}`: the classifier two-sample test (`realism.c2st`) between
        two image sets, with this evaluation's seed (`local`: its local-defect network)."""
        return realism.c2st(real_images, fake_images, seed=self.seed, local=local)

    @property
    def features_name(self):
        return describe_features(self.features_spec)

    def _load_extractor(self):
        if self._extractor is None:
            try:
                self._extractor = self._extractor_for(self.features_spec)
            except ConfigError:
                if self.features_named or self.features_spec != INCEPTION:
                    raise
                # Offline without InceptionV3 weights, and nobody asked for them: offline
                # features rather than no evaluation at all.
                fallback = SHAPES if self.task.data.get("source") == "shapes" else SELFSUP
                log.warning(
                    "eval: InceptionV3's weights could not be loaded (offline?); FID/KID use "
                    f"the offline features {describe_features(fallback)} instead (compare "
                    f"them only with other '{fallback}' numbers of the same real images and "
                    "seed; --features inception:PATH takes a local copy)"
                )
                self.features_spec = fallback
                self._extractor = self._extractor_for(fallback)
        return self._extractor

    def _extractor_for(self, spec):
        """`load_extractor(spec)`, given this evaluation's real images when it trains on
        them (`selfsup`)."""
        if spec != SELFSUP:
            return load_extractor(spec, self.features_key)
        if "images" not in self.task.capabilities:
            raise ConfigError(
                self.features_key,
                f"{SELFSUP} trains on the task's real images; task {self.task.name!r} has "
                "none (no real images)",
            )
        images, _ = self.task.real.draw(self.count, self.seed, self.count_key)
        return load_extractor(spec, self.features_key, images, self.seed)


def format_table(result):
    """A human-readable table of an evaluation result."""
    lines = [f"step {result['step']}  (ema: {'yes' if result['ema'] else 'no'})"]
    values = result["metrics"]
    width = max(len(k) for k in values) if values else 0
    for name, value in values.items():
        lines.append(f"  {name:<{width}}  {format_value(value)}")
    return "\n".join(lines)


def format_value(value):
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"
    return "n/a" if value is None else str(value)

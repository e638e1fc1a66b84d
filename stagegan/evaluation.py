"""Evaluation of a run: the task's metrics on a restored (or live) trainer.

    evaluation = Evaluation(trainer, run_dir, count=None, seed=0)
    result = evaluation.run()        # {"step": ..., "metrics": {name: value}}

The task decides what to measure (`Task.evaluate`); this module gives it batched sampling,
the run's stage-end checkpoints (for baselines such as the reconstruction-only stage), and
feature extractors for FID and KID. The maths lives in `stagegan.metrics`.
"""

import contextlib
import io
import math
import time

import numpy as np
import tensorflow as tf

from stagegan import metrics
from stagegan.checkpoints import CheckpointStore
from stagegan.errors import ConfigError

CHUNK = 256  # samples per forward pass
INCEPTION_SIDE = 299


class Evaluation:
    """One evaluation of a trainer's current weights.

    Args:
        trainer: a built `training.Trainer`, holding the weights to evaluate.
        run_dir: the run folder (its checkpoints give baselines), or None.
        count: samples to evaluate; None: the task's `eval_count`.
        seed: fixes the inputs (latents, held-out images, masks), so evaluations of different
            checkpoints see the same inputs.
        features: `package.module:function` of a feature extractor for FID/KID, or None for
            InceptionV3 with ImageNet weights.
        features_key: the config key or flag that named `features` (for errors).
        ema: sample from the EMA weights when the run keeps an EMA.
    """

    def __init__(
        self,
        trainer,
        run_dir,
        count=None,
        seed=0,
        features=None,
        features_key="--features",
        ema=True,
    ):
        self.trainer = trainer
        self.task = trainer.task
        self.run_dir = run_dir
        self.count = count or self.task.eval_count
        self.seed = seed
        self.features_path = features
        self.features_key = features_key
        self.ema = ema and trainer.ema is not None
        self._extractor = None

    def run(self):
        """Evaluate; returns `{"step", "ema", "count", "seconds", "metrics"}`."""
        start = time.perf_counter()
        values = self.task.evaluate(self)
        return {
            "step": self.trainer.step_count,
            "ema": self.ema,
            "seed": self.seed,
            "seconds": round(time.perf_counter() - start, 3),
            "metrics": values,
        }

    def check(self):
        """Load what the evaluation will need up front (feature extractors), so a problem
        shows before training starts."""
        if getattr(self.task, "needs_features", False):
            self._load_extractor()

    # Helpers for tasks ------------------------------------------------------------------------

    def sample_outputs(self, inputs):
        """`trainer.sample_outputs` over `inputs` in chunks of CHUNK; arrays concatenated."""
        count = len(next(iter(inputs.values())))
        pieces = []
        for start in range(0, count, CHUNK):
            chunk = {k: v[start : start + CHUNK] for k, v in inputs.items()}
            pieces.append(self.trainer.sample_outputs(chunk, ema=self.ema))
        return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}

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
        """The path of `stage`'s stage-end checkpoint in this run, or None."""
        if self.run_dir is None:
            return None
        store = CheckpointStore(self.run_dir / "checkpoints", None, 1)
        for entry in store.entries():
            if f"stage_end:{stage.name}" in entry["tags"]:
                return store.path_of(entry)
        return None

    @contextlib.contextmanager
    def weights_from(self, path):
        """Within the block the networks (and EMA) hold the weights of checkpoint `path`;
        everything else (optimizers, step, random state) is untouched, and the weights are
        restored afterwards."""
        trainer = self.trainer
        objects = {f"network_{scope}": net for scope, net in trainer.networks.items()}
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
        """Feature vectors [N, D] of images [N, S, S, C] in [-1, 1]."""
        extractor = self._load_extractor()
        out = []
        for start in range(0, len(images), CHUNK):
            out.append(np.asarray(extractor(images[start : start + CHUNK])))
        features = np.concatenate(out)
        return features.reshape(len(features), -1)

    def fid_kid(self, task):
        """FID and KID between `count` generated images and `count` real ones."""
        real, held_out = task.reference_images(self.count, self.seed)
        inputs, _ = task.sample_inputs(self.count, self.seed)
        fake = self.sample_outputs(inputs)["samples"]
        real_features, fake_features = self.features(real), self.features(fake)
        kid, kid_std = metrics.kernel_inception_distance(
            real_features, fake_features, seed=self.seed
        )
        return {
            "count": self.count,
            "held_out": held_out,
            "features": self.features_path or "InceptionV3 (ImageNet)",
            "fid": metrics.frechet_distance(real_features, fake_features),
            "kid": kid,
            "kid_std": kid_std,
        }

    def _load_extractor(self):
        if self._extractor is None:
            self._extractor = load_extractor(self.features_path, self.features_key)
        return self._extractor


def load_extractor(path, key):
    """A callable images [N, S, S, C] in [-1, 1] -> features.

    `path` names a function returning a `keras.Model` (or any callable) that takes images in
    [-1, 1] at the run's size; None means InceptionV3 with ImageNet weights (images resized to
    299x299, grey repeated to RGB, average-pooled 2048-d features).

    Raises:
        ConfigError: on `key` when the path does not load, or when InceptionV3's weights
            cannot be loaded (offline).
    """
    if path is not None:
        from stagegan.tasks import load_object

        builder = load_object(path, key)
        model = builder()
        if not callable(model):
            raise ConfigError(key, f"{path} returned {type(model).__name__}, not a callable")
        return lambda images: model(tf.constant(images, tf.float32), training=False)
    import keras

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # keras prints "Downloading ..."
            model = keras.applications.InceptionV3(
                include_top=False,
                pooling="avg",
                weights="imagenet",
                input_shape=(INCEPTION_SIDE, INCEPTION_SIDE, 3),
            )
    except Exception:  # noqa: BLE001 - offline, blocked or corrupt download: one message
        raise ConfigError(
            key,
            "FID/KID need InceptionV3's ImageNet weights, which could not be loaded "
            "(offline?); pass --features package.module:function naming any Keras feature "
            "extractor that maps images in [-1, 1] to features",
        ) from None

    def extract(images):
        images = tf.constant(images, tf.float32)
        if images.shape[-1] == 1:
            images = tf.repeat(images, 3, axis=-1)
        images = tf.image.resize(images, [INCEPTION_SIDE, INCEPTION_SIDE])
        return model(images, training=False)  # InceptionV3 expects [-1, 1]

    return extract


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

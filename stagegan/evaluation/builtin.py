"""The built-in metric families, declared in `stagegan.evaluation.registry` (their names,
directions, sample counts and needs) and computed here from an `Evaluation`: a task names
the ones it supports (`Task.metrics`) and computes none of them.

* `realism`: FID, KID, precision, recall, density, coverage, c2st and diversity between
  generated and real images (unconditional GANs; per class for a conditional one);
* `completion`: errors and realism of completed holes (the completion task);
* `mixture`: coverage of a 2-D Gaussian mixture (mog2d).
"""

import logging

import numpy as np
import tensorflow as tf

from stagegan.evaluation import metrics
from stagegan.evaluation.realism import collapse_warning, sample_diversity

log = logging.getLogger("stagegan")


def realism(evaluation):
    """FID, KID, precision, recall, density and coverage (`Evaluation.distances`) between
    `count` generated images and `count` real ones (held out where the source has a split),
    on `evaluation.features()`, and the classifier two-sample test on the images themselves
    (`c2st`, `c2st_std`); with memorisation's numbers when asked. A conditional GAN
    generates the real images' classes and adds `fid/<class>`, `kid/<class>` per class on
    those of that class (None for a class with fewer than 4 among the `count`), and the
    samples' diversity against the real images' (`diversity`), per class when conditional."""
    task, count, seed = evaluation.task, evaluation.count, evaluation.seed
    drawn = task.real.draw(count, seed, evaluation.count_key, labels=task.conditional)
    real, held_out = drawn[0], drawn[-1]
    inputs, _ = task.sample_inputs(count, seed)
    if task.conditional:
        inputs["fake_y"] = labels = drawn[1]
    fake = evaluation.sample_outputs(inputs)["samples"]
    if task.conditional:  # the order each family always had (a stateful extractor sees it)
        real_features, fake_features = evaluation.features(real), evaluation.features(fake)
    else:
        fake_features = evaluation.features(fake)
        real_features = evaluation.features(real)
    result = {
        "count": count,
        "held_out": held_out,
        "features": evaluation.features_name,  # after loading: it may have fallen back
        **evaluation.distances(real_features, fake_features),
        **evaluation.c2st(real, fake),
        **evaluation.memorisation(task, fake, fake_features),
    }
    for index, name in enumerate(task.classes if task.conditional else ()):
        chosen = labels == index
        both = (real_features[chosen], fake_features[chosen])
        per_class = evaluation.distances(*both) if chosen.sum() >= 4 else {"fid": None, "kid": None}
        result[f"fid/{name}"], result[f"kid/{name}"] = per_class["fid"], per_class["kid"]
    classes = (labels, task.classes) if task.conditional else (None, ())
    result.update(diversity(real_features, fake_features, *classes))
    return result


def diversity(real_features, fake_features, labels=None, classes=()):
    """`realism.sample_diversity` in the evaluation's features, with one warning line naming
    the classes (or the samples) it finds collapsed (`realism.collapse_warning`).

    Features rather than pixels: they are the space FID and recall judge variety in, and
    pixel distances count a shifted or recoloured copy of one picture as a new sample."""
    result = sample_diversity(real_features, fake_features, labels, classes)
    line = collapse_warning(result)
    if line is not None:
        log.warning(line)
    return result


def completion(evaluation):
    """Errors and realism of completions of held-out images (values in [0, 1]).

    * `l1`, `psnr`, `ssim`: per-pixel errors in the holes;
    * `structure`, `sharpness`: the local structure (gradient and Laplacian magnitudes)
      in the holes against the same images whole (`metrics.structure_metrics`);
    * `c2st`: a classifier's held-out accuracy telling completed images from the same
      images whole (0.5: it cannot; 1: it always can), with its spread: it sees the
      crop around each hole (the discriminator's local crop) with the mask as a
      channel, the same for both, so it judges the fill against the pixels that
      were there (`stagegan.evaluation.realism.c2st`, its local network);
    * `fid`: the Fréchet distance between the features of the completed images and of
      the same images whole (0 for a perfect completion; a blurred or implausible fill
      raises it), on `evaluation.features()`, when the evaluation uses features
      (`Metric.features` "optional");
    * `mean_fill/*`: the same for the mean colour of the known pixels filled in;
    * `reconstruction_stage_end/*`: the same for this run's generator as it was at the end
      of its last reconstruction-only stage (an earlier checkpoint, after fewer steps:
      not an ablation of the adversarial loss, which `benchmarks/ablation.py` is).
    """
    task = evaluation.task
    inputs, info = task.sample_inputs(evaluation.count, evaluation.seed, evaluation.count_key)
    x, mask = inputs["x"], inputs["mask"]
    truth = (x + 1.0) / 2.0
    realism = evaluation.uses_features
    marked = 2.0 * mask - 1.0  # the mask as a channel, in [-1, 1]

    def hole_crops(images):
        both = tf.constant(np.concatenate([images, marked], -1))
        return task.crops(both, tf.constant(inputs["crop_offset"])).numpy()

    real_features = evaluation.features(x) if realism else None

    def score(completed):
        values = metrics.hole_metrics(truth, (completed + 1.0) / 2.0, mask)
        values.update(metrics.structure_metrics(truth, (completed + 1.0) / 2.0, mask))
        values.update(evaluation.c2st(hole_crops(x), hole_crops(completed), local=True))
        if realism:
            fake_features = evaluation.features(completed)
            values["fid"] = metrics.frechet_distance(real_features, fake_features)
        return values

    result = {"held_out": bool(info["held_out"]), "count": len(x)}
    if realism:
        result["features"] = evaluation.features_name
    result.update(score(evaluation.sample_outputs(inputs)["samples"]))
    known = 1.0 - mask
    mean_colour = (x * known).sum(axis=(1, 2), keepdims=True) / known.sum(
        axis=(1, 2), keepdims=True
    )
    fill = x * known + mean_colour * mask
    result.update({f"mean_fill/{k}": v for k, v in score(fill).items()})
    stage = evaluation.last_stage_with_only(task.reconstruction_terms, "generator")
    path = evaluation.stage_checkpoint(stage) if stage else None
    if path is not None:
        with evaluation.weights_from(path):
            baseline = evaluation.sample_outputs(inputs)["samples"]
        prefix = "reconstruction_stage_end"
        result[f"{prefix}/step"] = evaluation.stage_end_step(stage)
        result.update({f"{prefix}/{k}": v for k, v in score(baseline).items()})
    return result


def mixture(evaluation):
    """Modes captured, share of high-quality samples and reverse KL of the task's Gaussian
    mixture (`task.centres`, `task.std`; `metrics.mode_metrics`)."""
    task = evaluation.task
    inputs, _ = task.sample_inputs(evaluation.count, evaluation.seed)
    points = evaluation.sample_outputs(inputs)["samples"]
    coverage = metrics.mode_metrics(points, task.centres.numpy(), task.std)
    return {"count": len(points), **coverage}

"""Evaluation metrics, each declared once: its name, which way is better, and (for a metric
the user adds) how to compute it. Everything that ranks evaluations (`checkpoint.keep_best`,
`until: {eval: ...}`, `plan`) asks here, as stylegan2-ada-pytorch's `metric_main` serves its
training loop and its `calc_metrics.py` alike. TF-free.

A metric of one's own, computed in every evaluation of a run that names it:

    @stagegan.register_metric("brightness", mode="max")
    def brightness(evaluation):
        return float(evaluation.samples().mean())   # a number, or None: no value this time

    # run config: eval: {metrics: ["my_package.metrics:brightness"]}
    #             checkpoint: {keep_best: brightness}  (or until: {eval: brightness, ...})

A task names the metrics it supports (`Task.metrics`) and computes none of them. The
built-in ones come in families computed together (FID and KID share one set of features,
the hole metrics one set of completions): `realism`, `completion` and `mixture` below, whose
functions live in `stagegan.evaluation.builtin`; each number a family gives is declared
here with its direction. A name with a prefix or suffix (`mean_fill/fid`, `fid/<class>`)
ranks as the declared metric at its end, else at its start.
"""

import dataclasses

from stagegan.config.objects import load_object
from stagegan.config.schema import Plateau
from stagegan.errors import ConfigError

MODES = ("auto", "min", "max")
COUNT = 1000  # samples an evaluation uses when none of its metrics says
ATTRIBUTE = "stagegan_metric"  # the `Metric` a decorated function carries


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric.

    Attributes:
        name: its name in `eval.jsonl` and in the config.
        mode: "min" (lower is better), "max" (higher is better), or None (a count or a
            label, not a score: it can rank nothing).
        doc: one line on what it measures.
        compute: `compute(evaluation) -> number or None`; for a family (`gives`)
            `-> {name: value}`, or the `"package.module:function"` of that function (the
            built-in families: this module imports no TensorFlow). None: a number a family
            gives, declared for its direction.
        needs: task capabilities it reads (`"images"`: samples that are images), checked
            before the first step.
        gives: a family's numbers (each declared on its own); () for a single number.
        count: the samples it is usually computed on (`eval.count` unless told otherwise;
            an image task's real images may be fewer); None: `COUNT`.
        min_count: the fewest samples it can be computed on, and why (`(4, "FID/KID")`).
        features: whether it is computed in image features (`eval.features`): "always",
            "optional" (when features are named, or the source's own need no download:
            `shapes`), or None.
    """

    name: str
    mode: object
    doc: str = ""
    compute: object = None
    needs: frozenset = frozenset()
    gives: tuple = ()
    count: object = None
    min_count: tuple = (1, "")
    features: object = None


METRICS = {}


def declare(name, mode, doc="", compute=None, needs=(), **family):
    """Add a metric to the registry (a name already declared must be declared the same way,
    or be the same function again: a module imported twice). `family`: `Metric`'s `gives`,
    `count`, `min_count`, `features`."""
    if mode not in ("min", "max", None):
        raise ValueError(f"metric {name!r}: mode must be 'min', 'max' or None, not {mode!r}")
    if family.get("features") not in (None, "always", "optional"):
        raise ValueError(f"metric {name!r}: features must be 'always', 'optional' or None")
    metric = Metric(name, mode, doc, compute, frozenset(needs), **family)
    known = METRICS.get(name)
    if known is not None and known != metric and not _same_function(known, metric):
        raise ValueError(f"metric {name!r} is already declared ({known.doc or known.compute})")
    METRICS[name] = metric
    return metric


def _same_function(a, b):
    def where(metric):
        code = getattr(metric.compute, "__code__", None)
        return code and (code.co_filename, getattr(metric.compute, "__qualname__", None))

    return a.mode == b.mode and where(a) is not None and where(a) == where(b)


def register_metric(name, mode, needs=(), doc=None, features=None, count=None, min_count=1):
    """Decorator: `function(evaluation) -> number or None` becomes the metric `name`, better
    when lower (`mode="min"`), higher (`"max"`), or neither (None: a count, it ranks nothing).
    `needs`: task capabilities it reads
    (`("images",)` when it looks at images). `features`: "always" when it calls
    `evaluation.features()` (the extractor is then loaded, and `eval.features` accepted,
    before the first step), "optional" when it does only if features are named. `count`: the
    samples it is usually computed on; `min_count`: the fewest it can be. The function is
    returned unchanged, marked so a config may name it as `package.module:function`
    (`eval.metrics`) and a task in its `metrics`."""

    def wrap(function):
        text = doc if doc is not None else (function.__doc__ or "").strip().split("\n")[0]
        least = (min_count, f"metric {name!r}")
        family = {"features": features, "count": count, "min_count": least}
        metric = declare(name, mode, text, function, needs, **family)
        setattr(function, ATTRIBUTE, metric)
        return function

    return wrap


def lookup(name):
    """The declared `Metric` that ranks `name` (see the module doc), or None."""
    if name in METRICS:
        return METRICS[name]
    parts = name.split("/")
    for part in (parts[-1], parts[0]) if len(parts) > 1 else ():
        metric = METRICS.get(part)
        if metric is not None and metric.compute is None:
            return metric
    return None


def better(name):
    """ "lower is better", "higher is better", or "" (no declared direction) for `name`."""
    metric = lookup(name)
    mode = metric.mode if metric is not None else None
    return {"min": "lower is better", "max": "higher is better"}.get(mode, "")


def resolve_mode(name, mode, key):
    """`mode` ("min" or "max"), or with "auto" the declared direction of `name`.

    Raises:
        ConfigError: at `key`.mode when `name` has no declared direction.
    """
    if mode in ("min", "max"):
        return mode
    metric = lookup(name)
    if metric is None or metric.mode is None:
        scored = sorted(n for n, m in METRICS.items() if m.mode is not None)
        raise ConfigError(
            f"{key}.mode",
            f"must be min or max (which way {name!r} is better is not declared; auto knows "
            f"{', '.join(scored)})",
        )
    return metric.mode


def load_metrics(names, key="eval.metrics"):
    """The `Metric`s a config lists: a declared name, or `package.module:function` naming a
    function decorated with `register_metric` (importing it declares it)."""
    found = []
    for index, name in enumerate(names):
        where = f"{key}[{index}]"
        if ":" in name:
            function = load_object(name, where)
            metric = getattr(function, ATTRIBUTE, None)
            if metric is None:
                raise ConfigError(
                    where,
                    f"{name!r} is not a metric (decorate it with @stagegan.register_metric"
                    "(name, mode))",
                )
        else:
            metric = METRICS.get(name)
            if metric is None or metric.compute is None:
                added = sorted(n for n, m in METRICS.items() if m.compute is not None)
                have = f"declared: {', '.join(added)}" if added else "none is declared"
                raise ConfigError(
                    where,
                    f"no metric {name!r} to add (a name made by @stagegan.register_metric, or "
                    f"package.module:function; {have}; the task's own metrics need no entry)",
                )
        found.append(metric)
    return found


def computed(name):
    """The added (computed) metric `name`, or None."""
    metric = METRICS.get(name)
    return metric if metric is not None and metric.compute is not None else None


# The numbers the built-in families give, with their directions.
for _name, _mode, _doc in (
    ("fid", "min", "Fréchet distance between feature sets of real and generated images"),
    ("kid", "min", "kernel inception distance (unbiased MMD^2, cubic kernel)"),
    ("kid_std", None, "KID's spread over its subsets"),
    ("precision", "max", "share of samples inside the real images' feature manifold"),
    ("recall", "max", "share of real images inside the samples' feature manifold"),
    ("density", "max", "how many real neighbourhoods hold each sample"),
    ("coverage", "max", "share of real images with a sample in their neighbourhood"),
    ("c2st", "min", "a classifier's held-out accuracy telling samples from real (0.5: chance)"),
    (
        "diversity",
        "max",
        "samples' mean nearest-neighbour distance over the real images' (1: as varied; per "
        "class: their mean)",
    ),
    ("diversity_worst", "max", "the least varied class's diversity (unconditional: diversity)"),
    ("c2st_std", None, "c2st's spread over its folds"),
    ("l1", "min", "mean absolute error in the holes"),
    ("psnr", "max", "peak signal-to-noise ratio in the holes"),
    ("ssim", "max", "structural similarity in the holes"),
    ("structure", "min", "Fréchet distance of local gradient statistics in the holes"),
    ("sharpness", None, "Laplacian energy in the holes against the truth (1: as sharp)"),
    ("modes", "max", "mixture modes captured"),
    ("modes_total", None, "mixture modes in the data"),
    ("high_quality", "max", "share of samples within 3 standard deviations of a mode"),
    ("reverse_kl", "min", "KL(generated mode histogram || uniform)"),
    ("kl", "min", "a Kullback-Leibler divergence"),
    ("count", None, "samples evaluated"),
    # `memorisation/copies`, `memorisation/memorised`, ...: readings against their held-out
    # twins and chance levels (`stagegan.evaluation.memorisation`), not scores to rank by.
    ("memorisation", None, "comparisons of the samples with the training and held-out images"),
):
    declare(_name, _mode, _doc)


BUILTIN = "stagegan.evaluation.builtin"
_HOLES = ("l1", "psnr", "ssim", "structure", "sharpness", "c2st", "c2st_std", "fid")
declare(
    "realism",
    None,
    "FID, KID, precision, recall, density, coverage, c2st and diversity of generated "
    "against real images (and per class, for a conditional GAN)",
    f"{BUILTIN}:realism",
    needs=("images", "latents"),
    gives=("count", "fid", "kid", "kid_std", "precision", "recall", "density", "coverage")
    + ("c2st", "c2st_std", "diversity", "diversity_worst"),
    count=10000,  # FID's usual sample count
    min_count=(4, "FID/KID"),
    features="always",
)
declare(
    "completion",
    None,
    "errors and realism of completed holes in held-out images, against a mean-colour fill "
    "and the run's reconstruction-only stage",
    f"{BUILTIN}:completion",
    needs=("images", "inputs"),
    gives=tuple(
        f"{prefix}{name}"
        for prefix in ("", "mean_fill/", "reconstruction_stage_end/")
        for name in _HOLES
    )
    + ("count", "reconstruction_stage_end/step"),
    features="optional",
)
declare(
    "mixture",
    None,
    "mixture modes captured, share of high-quality samples and reverse KL",
    f"{BUILTIN}:mixture",
    needs=("mixture",),
    gives=("count", "modes", "modes_total", "high_quality", "reverse_kl"),
    count=2500,  # as in the VEEGAN and PacGAN papers
)


def task_metrics(task):
    """The `Metric`s task `task` names (`Task.metrics`).

    Raises:
        ConfigError: at `task` for a name no metric is declared under.
    """
    found = []
    for name in task.metrics:
        metric = METRICS.get(name)
        if metric is None or metric.compute is None:
            known = sorted(n for n, m in METRICS.items() if m.compute is not None)
            raise ConfigError(
                "task",
                f"task {task.name!r} names the metric {name!r}, which is not declared "
                f"(@stagegan.register_metric; declared: {', '.join(known)})",
            )
        found.append(metric)
    return found


def evaluated(config, task):
    """The metrics an evaluation of run `config` computes unless a ranking adds one: the
    task's own and those `eval.metrics` lists (`settle` says which ones are added in all)."""
    own = task_metrics(task)
    listed = load_metrics((config.eval.metrics or ()) if config.eval is not None else ())
    return own + [metric for metric in listed if metric not in own]


def gives(metrics):
    """The names of the numbers `metrics` give, in order, each once."""
    names = []
    for metric in metrics:
        for name in metric.gives or (metric.name,):
            if name not in names:
                names.append(name)
    return names


def usual_count(metrics):
    """The samples an evaluation of `metrics` uses unless told otherwise: the most any of
    them usually takes (`Metric.count`), else `COUNT`."""
    counts = [m.count for m in metrics if m.count is not None]
    return max(counts) if counts else COUNT


def check_count(metrics, count, key):
    """Raise `ConfigError(key)` when `count` samples are too few for one of `metrics`."""
    for metric in metrics:
        least, what = metric.min_count
        if count < least:
            raise ConfigError(
                key,
                f"{what} {'needs' if what.startswith('metric ') else 'need'} at least {least} "
                f"samples; {count} are available",
            )


def settle(config, task):
    """The run's metrics settled before the first step: `(config, added)`, `config` with
    every `mode: auto` of `checkpoint.keep_best` and `until: {eval: ...}` resolved to min or
    max, `added` the computed metrics its evaluations add to the task's own (those
    `eval.metrics` lists, and any that keep_best or an until plateau names).

    Raises:
        ConfigError: a metric the task does not evaluate, of no declared direction, or
            needing what the task has not (`needs`).
    """
    own = task_metrics(task)
    added = evaluated(config, task)[len(own) :]  # those eval.metrics lists
    keep_best = config.checkpoint.keep_best
    ranked = [(keep_best.metric, "checkpoint.keep_best")] if keep_best is not None else []
    ranked += [(s.until.eval, s.until.key) for s in config.stages if _plateau(s.until)]
    for name, _ in ranked:
        metric = computed(name)
        if metric is not None and metric not in added and metric not in own:
            added.append(metric)
    for metric in own + added:
        missing = metric.needs - set(task.capabilities)
        if missing:
            raise ConfigError(
                "task" if metric in own else "eval.metrics",
                f"metric {metric.name!r} needs a task with {', '.join(sorted(missing))}; task "
                f"{task.name!r} has {', '.join(sorted(task.capabilities)) or 'none'}",
            )
    known = gives(own + added)
    for name, key in ranked:
        if name not in known:
            where = f"{key}.metric" if key == "checkpoint.keep_best" else f"{key}.eval"
            raise ConfigError(
                where,
                f"task {task.name!r} evaluates no {name!r} (it has: {', '.join(known) or 'none'})",
            )
    if keep_best is not None and keep_best.mode == "auto":
        mode = resolve_mode(keep_best.metric, keep_best.mode, "checkpoint.keep_best")
        checkpoint = dataclasses.replace(
            config.checkpoint, keep_best=dataclasses.replace(keep_best, mode=mode)
        )
        config = dataclasses.replace(config, checkpoint=checkpoint)
    stages, changed = [], False
    for stage in config.stages:
        if _plateau(stage.until) and stage.until.mode == "auto":
            mode = resolve_mode(stage.until.eval, stage.until.mode, stage.until.key)
            stage = dataclasses.replace(stage, until=dataclasses.replace(stage.until, mode=mode))
            changed = True
        stages.append(stage)
    if changed:
        config = dataclasses.replace(config, stages=tuple(stages))
    return config, added


def _plateau(until):
    return isinstance(until, Plateau)

"""Metrics declared once (`stagegan.evaluation.registry`): their directions, `mode: auto`, and
a metric defined only here that drives `until: {eval: ...}` and `checkpoint.keep_best`.

The metric, `toy_darkness` (minus the mean of tanh of the toy generator's samples: their
darkness, higher is better), is
computed by the run from `Evaluation.samples()`; the test computes it again from each
checkpoint's weights in numpy, and from those values, by hand, the step at which the plateau
ends the stage and the step tagged `best`.
"""

import json

import numpy as np
import pytest
from clihelp import assert_user_error, inprocess
from toytask import D_UPDATE, G_UPDATE, read_checkpoint, toy_config

import stagegan
from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError
from stagegan.evaluation import registry
from stagegan.tasks.base import NOISE_STREAM, make_generator
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer

COUNT, EVERY, PATIENCE = 64, 2, 2
FIRST, JOINT = 2, 20  # D alone, then D and G together for at most 20 steps


@stagegan.register_metric("toy_darkness", mode="max")
def toy_darkness(evaluation):
    """How dark the samples are: minus their mean brightness, tanh(sample) in [-1, 1]."""
    return -float(np.mean(np.tanh(evaluation.samples())))


@stagegan.register_metric("toy_tally", mode=None)  # a count, not a score: it ranks nothing
def toy_tally(evaluation):
    return len(evaluation.samples())


@stagegan.register_metric("toy_nothing", mode="min")
def toy_nothing(evaluation):
    return "dark"


def metric_config(name, **changes):
    stages = [
        {"name": "d_only", "steps": FIRST, "updates": [D_UPDATE]},
        {
            "name": "joint",
            "steps": JOINT,
            "mode": "simultaneous",
            "updates": [D_UPDATE, G_UPDATE],
            "until": {"eval": "toy_darkness", "patience": PATIENCE, "check_every": EVERY},
        },
    ]
    defaults = {
        "optimizers": {
            "d": {"type": "adam", "learning_rate": 0.05},
            "g": {"type": "adam", "learning_rate": 0.05},
        },
        "checkpoint": {"every": EVERY, "keep": 100, "keep_best": "toy_darkness"},
        "eval": {"every": EVERY, "count": COUNT},
        "log": {"every": 1, "tensorboard": False},
        "samples": None,
        "deterministic": True,
    }
    return toy_config(stages, name, seed=3, **{**defaults, **changes})


def darkness_by_hand(prefix, z):
    values = read_checkpoint(prefix)

    def weight(name):
        return values[f"generator:{name}/.ATTRIBUTES/VARIABLE_VALUE"]

    hidden = np.tanh(z @ weight("hidden:kernel") + weight("hidden:bias"))
    return -float(np.mean(np.tanh(hidden @ weight("out:kernel") + weight("out:bias"))))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("metric") / "run"
    folder.mkdir()
    config = parse_config(metric_config("metric"))
    (folder / "config.yaml").write_text(config.to_yaml())
    train(Trainer(config), folder)
    return folder


def test_a_metric_defined_here_ends_the_stage_and_tags_best_where_the_hand_says(run):
    z = make_generator(3, NOISE_STREAM).normal([COUNT, 2]).numpy()
    index = json.loads((run / "checkpoints" / "index.json").read_text())["checkpoints"]
    prefixes = {e["step"]: run / "checkpoints" / e["prefix"] for e in index}
    # The evaluations: every 2 steps (stage 1 ends at 2); each is a check of the plateau from
    # the joint stage's second step on (global steps 4, 6, ...).
    by_hand, best, bad, ended = {}, None, 0, None
    for step in range(EVERY, FIRST + JOINT + 1, EVERY):
        by_hand[step] = darkness_by_hand(prefixes[step], z)
        if step <= FIRST:
            continue
        if best is None or by_hand[step] > best:
            best, bad = by_hand[step], 0
        else:
            bad += 1
            if bad == PATIENCE:
                ended = step
                break
    assert ended is not None and ended < FIRST + JOINT, by_hand  # the plateau ended it ...
    assert FIRST < max(by_hand, key=by_hand.get) < ended, by_hand  # ... after a best mid-way
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["eval/toy_darkness"] for r in records if "eval/toy_darkness" in r}
    assert sorted(logged) == sorted(by_hand)
    np.testing.assert_allclose([logged[s] for s in by_hand], list(by_hand.values()), rtol=1e-5)
    stage_end = next(e["step"] for e in index if "stage_end:joint" in e["tags"])
    assert stage_end == ended and index[-1]["step"] == ended
    first_best = max(by_hand, key=lambda s: (by_hand[s], -s))  # ties go to the earlier step
    assert [e["step"] for e in index if "best" in e["tags"]] == [first_best]


def test_the_plan_says_which_way_auto_resolved(run):
    result = inprocess("plan", "--config", run / "config.yaml")
    assert result.returncode == 0, result.stderr
    assert "keep best: the checkpoint of the highest eval toy_darkness" in result.stdout
    assert "eval toy_darkness (higher is better)" in result.stdout
    assert (
        "evaluation: every 2 steps and at stage ends; at the until checks of 'joint'; 64 "
        "samples: gap (lower is better), toy_darkness (higher is better)"
    ) in result.stdout


@pytest.mark.parametrize(
    "name, mode",
    [
        ("fid", "min"),
        ("mean_fill/psnr", "max"),
        ("reconstruction_stage_end/ssim", "max"),
        ("fid/cat", "min"),
        ("diversity", "max"),
        ("diversity/cluster03", "max"),
        ("diversity_worst", "max"),
        ("memorisation/held_out_copies", None),
        ("toy_darkness", "max"),
        ("count", None),
        ("sharpness", None),
    ],
)
def test_auto_takes_the_declared_direction(name, mode):
    if mode is None:
        with pytest.raises(ConfigError) as caught:
            registry.resolve_mode(name, "auto", "checkpoint.keep_best")
        assert caught.value.key == "checkpoint.keep_best.mode"
        assert f"which way {name!r} is better is not declared" in str(caught.value)
    else:
        assert registry.resolve_mode(name, "auto", "k") == mode
    assert registry.resolve_mode(name, "max", "k") == "max"  # said outright: as said


def test_a_name_is_declared_once():
    with pytest.raises(ValueError, match="already declared"):
        registry.declare("fid", "max")

    stagegan.register_metric("toy_darkness", mode="max")(toy_darkness)  # a module imported again

    def other(evaluation):
        return 0.0

    with pytest.raises(ValueError, match="already declared"):
        stagegan.register_metric("toy_darkness", mode="max")(other)
    with pytest.raises(ValueError, match="mode must be"):
        registry.declare("toy_other", "up")


@pytest.mark.parametrize(
    "changes, key, words",
    [
        ({"checkpoint": {"keep_best": "toy_tally"}}, "checkpoint.keep_best.mode", ["'toy_tally'"]),
        ({"eval": {"metrics": ["toy_nowhere"]}}, "eval.metrics[0]", ["no metric 'toy_nowhere'"]),
        ({"eval": {"metrics": ["toytask:factory"]}}, "eval.metrics[0]", ["is not a metric"]),
        ({"eval": {"metrics": ["nomodule:f"]}}, "eval.metrics[0]", ["cannot import"]),
        ({"eval": {"metrics": "toy_darkness"}}, "eval.metrics", ["must be a list"]),
        ({"checkpoint": {"keep_best": {"metric": "toy_darkness", "mode": "up"}}}, "mode", ["auto"]),
    ],
)
def test_bad_metric_settings_are_refused_before_training(changes, key, words, tmp_path):
    raw = metric_config("bad")
    raw["stages"][1].pop("until")
    for section, value in changes.items():
        raw[section] = {**raw[section], **value}
    with pytest.raises(ConfigError) as caught:
        Trainer(parse_config(raw))
    assert caught.value.key.endswith(key), caught.value.key
    for word in words:
        assert word in str(caught.value)


def test_a_metric_that_returns_no_number_stops_with_one_line(tmp_path):
    raw = metric_config("nothing", eval={"every": EVERY, "count": 8, "metrics": ["toy_nothing"]})
    raw["stages"][1].pop("until")
    raw["checkpoint"].pop("keep_best")
    path = tmp_path / "nothing.yaml"
    path.write_text(json.dumps(raw))
    result = inprocess("train", "--config", path, "--run-dir", tmp_path / "run")
    assert_user_error(result, "eval.metrics: metric 'toy_nothing' returned 'dark'")


def test_a_plateau_of_an_undeclared_metric_names_its_key():
    raw = metric_config("undeclared")
    raw["stages"][1]["until"]["eval"] = "toy_unknown"
    with pytest.raises(ConfigError) as caught:
        Trainer(parse_config(raw))
    assert caught.value.key == "stages[1].until.eval"
    assert "evaluates no 'toy_unknown' (it has: gap, toy_darkness)" in str(caught.value)


@stagegan.register_metric("toy_featured", mode="min", features="always", count=77, min_count=5)
def toy_featured(evaluation):
    return float(np.mean(evaluation.features(evaluation.samples())))


def test_a_metric_declares_its_counts_and_its_use_of_features():
    """What the evaluation used to ask a task (its usual count, its fewest, whether it loads
    a feature extractor before the first step) is the metric's own declaration."""
    import types

    from stagegan.evaluation.evaluate import Evaluation

    metric = registry.METRICS["toy_featured"]
    assert registry.usual_count([metric]) == 77
    assert registry.usual_count([registry.METRICS["toy_darkness"]]) == registry.COUNT == 1000
    assert registry.usual_count([metric, registry.METRICS["realism"]]) == 10000
    with pytest.raises(ConfigError) as caught:
        registry.check_count([metric], 4, "--count")
    assert caught.value.key == "--count"
    assert "metric 'toy_featured' needs at least 5 samples; 4 are available" in str(caught.value)
    registry.check_count([metric], 5, "--count")
    with pytest.raises(ValueError, match="features must be"):
        registry.declare("toy_bad_features", "min", features="sometimes")

    def evaluation_of(*names):
        task = types.SimpleNamespace(name="stub", data={}, metrics=names, capabilities=set())
        trainer = types.SimpleNamespace(task=task, ema=None, added_metrics=())
        return Evaluation(trainer, None, batch_size=8)

    assert evaluation_of("toy_featured").uses_features
    assert evaluation_of("toy_featured").count == 77
    assert not evaluation_of("toy_darkness").uses_features


def test_a_task_naming_a_metric_it_cannot_serve_is_one_line_before_training():
    """A task that names a built-in family without what it reads (the toy task has no real
    images and no mixture) is refused when the run is built, naming `task`."""
    from toytask import ToyTask

    for family, missing in (("realism", "images, latents"), ("mixture", "mixture")):
        ToyTask.metrics = ("gap", family)
        try:
            with pytest.raises(ConfigError) as caught:
                Trainer(parse_config(metric_config("family")))
        finally:
            ToyTask.metrics = ("gap",)
        assert caught.value.key == "task", caught.value
        assert f"metric {family!r} needs a task with {missing}" in caught.value.message

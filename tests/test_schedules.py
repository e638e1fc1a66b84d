"""Learning-rate schedules: parsing, the values against hand-written formulas, the counter that
drives them (the optimizer's own iterations), `plan`, and resume."""

import math

import pytest
import tensorflow as tf
from toytask import D_UPDATE, G_UPDATE, optimizers, toy_config

from stagegan.config.schema import parse_config
from stagegan.core.optimizers import describe, schedule
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.run.resume import check_changes
from stagegan.training.trainer import Trainer

D, G = D_UPDATE, G_UPDATE


def raw(g_rate, d_rate=0.01, stages=None):
    stages = stages or [
        {"name": "d_only", "steps": 3, "updates": [{**D, "repeat": 2}]},
        {"name": "alternating", "steps": 4, "updates": [D, G]},
    ]
    return toy_config(stages, "sched", optimizers=optimizers("sgd", g_rate, d_rate))


def rate_of(spec, iteration):
    return float(
        schedule(parse_config(raw(spec)).optimizers["g"].kwargs()["learning_rate"])(iteration)
    )


# The formulas, written out by hand: warm-up w, then the schedule at i - w.


def linear(i, initial, final, steps):
    return initial + (final - initial) * min(i, steps) / steps


def cosine(i, initial, final, steps):
    return final + (initial - final) * 0.5 * (1 + math.cos(math.pi * min(i, steps) / steps))


@pytest.mark.parametrize(
    "spec, formula",
    [
        ({"schedule": "constant", "initial": 0.3}, lambda i: 0.3),
        (
            {"schedule": "linear", "initial": 0.4, "final": 0.1, "steps": 10},
            lambda i: linear(i, 0.4, 0.1, 10),
        ),
        (
            {"schedule": "cosine", "initial": 0.4, "final": 0.1, "steps": 10},
            lambda i: cosine(i, 0.4, 0.1, 10),
        ),
        (
            {"schedule": "exponential", "initial": 0.4, "decay_rate": 0.5, "steps": 4},
            lambda i: 0.4 * 0.5 ** (i / 4),
        ),
        (
            {
                "schedule": "exponential",
                "initial": 0.4,
                "decay_rate": 0.5,
                "steps": 4,
                "staircase": True,
            },
            lambda i: 0.4 * 0.5 ** (i // 4),
        ),
        (
            {"schedule": "linear", "initial": 0.4, "steps": 10, "warmup": 5},
            lambda i: 0.4 * i / 5 if i < 5 else linear(i - 5, 0.4, 0.0, 10),
        ),
        (
            {"schedule": "constant", "initial": 0.2, "warmup": 4},
            lambda i: 0.2 * i / 4 if i < 4 else 0.2,
        ),
    ],
)
def test_schedule_values_match_the_formulas(spec, formula):
    for i in [0, 1, 3, 4, 5, 7, 10, 14, 15, 30]:
        assert rate_of(spec, i) == pytest.approx(formula(i), rel=1e-5, abs=1e-7), i


@pytest.mark.parametrize(
    "spec, key, words",
    [
        ({"schedule": "quadratic", "initial": 1.0}, "learning_rate.schedule", "linear"),
        ({"initial": 1.0}, "learning_rate.schedule", "required"),
        ({"schedule": "linear", "initial": 1.0}, "learning_rate.steps", "required"),
        ({"schedule": "linear", "initial": 1.0, "steps": 0}, "learning_rate.steps", "at least 1"),
        ({"schedule": "linear", "initial": -1.0, "steps": 5}, "learning_rate.initial", "positive"),
        (
            {"schedule": "linear", "initial": 1.0, "steps": 5, "final": 2.0},
            "learning_rate.final",
            "between 0 and initial",
        ),
        (
            {"schedule": "cosine", "initial": float("nan"), "steps": 5},
            "learning_rate.initial",
            "finite",
        ),
        (
            {"schedule": "constant", "initial": 1.0, "steps": 5},
            "learning_rate.steps",
            "unknown key",
        ),
        (
            {"schedule": "constant", "initial": 1.0, "warmup": -1},
            "learning_rate.warmup",
            "at least 0",
        ),
        (
            {"schedule": "exponential", "initial": 1.0, "steps": 5},
            "learning_rate.decay_rate",
            "required",
        ),
        (
            {
                "schedule": "exponential",
                "initial": 1.0,
                "steps": 5,
                "decay_rate": 0.5,
                "staircase": "yes",
            },
            "learning_rate.staircase",
            "true or false",
        ),
    ],
)
def test_bad_schedules_name_the_key(spec, key, words):
    with pytest.raises(ConfigError) as info:
        parse_config(raw(spec))
    assert info.value.key == f"optimizers.g.{key}"
    assert words in info.value.message


def test_the_optimizers_own_iterations_drive_the_schedule():
    """Stage 0 runs D twice per step (repeat 2), stage 1 once per step; G only in stage 1.
    Each optimizer's schedule reads the number of updates it applied."""
    g_spec = {"schedule": "linear", "initial": 0.4, "final": 0.0, "steps": 8}
    d_spec = {"schedule": "linear", "initial": 0.2, "final": 0.0, "steps": 20}
    trainer = Trainer(parse_config(raw(g_spec, d_spec)))
    seen = []
    for position in trainer.schedule.positions():
        metrics = trainer.step(position).metrics
        seen.append(
            (
                float(metrics["discriminator/learning_rate"]),
                float(metrics.get("generator/learning_rate", math.nan)),
            )
        )
    d_iterations = [2 * s + 1 for s in range(3)] + [6 + s for s in range(4)]  # last apply
    for (d_rate, g_rate), d_iteration, step in zip(seen, d_iterations, range(7), strict=True):
        assert d_rate == pytest.approx(linear(d_iteration, 0.2, 0.0, 20), rel=1e-5)
        if step >= 3:  # G's first update is its iteration 0, at global step 3
            assert g_rate == pytest.approx(linear(step - 3, 0.4, 0.0, 8), rel=1e-5)
    assert int(trainer.optimizers["d"].iterations) == 10
    assert int(trainer.optimizers["g"].iterations) == 4


def test_plan_shows_the_schedule():
    spec = {"schedule": "cosine", "initial": 5e-4, "final": 1e-5, "steps": 2000, "warmup": 100}
    config = parse_config(raw(spec))
    assert describe(config.optimizers["g"]) == (
        "sgd(learning_rate=cosine(0.0005 -> 1e-05 over 2000 iterations, warm-up 100))"
    )
    trainer = Trainer(config)
    trainer.trace()
    assert "learning_rate=cosine(0.0005 -> 1e-05 over 2000 iterations" in describe_plan(trainer)


def test_resume_may_change_a_schedule_but_not_switch_a_number_for_one():
    spec = {"schedule": "linear", "initial": 0.4, "final": 0.0, "steps": 8}
    old = parse_config(raw(spec))
    changed = check_changes(old, parse_config(raw({**spec, "final": 0.1})), step=5)
    assert changed == {"optimizers.g.learning_rate.final": (0.0, 0.1)}
    assert check_changes(parse_config(raw(0.1)), parse_config(raw(0.2)), step=5)
    with pytest.raises(ConfigError) as info:
        check_changes(parse_config(raw(0.1)), parse_config(raw(spec)), step=5)
    assert info.value.key == "optimizers.g.learning_rate"
    assert "number and a schedule" in info.value.message


def test_a_restored_optimizer_goes_on_at_the_same_rate(tmp_path):
    spec = {"schedule": "cosine", "initial": 0.4, "final": 0.01, "steps": 6, "warmup": 2}
    config = parse_config(raw(spec))
    first = Trainer(config)
    positions = list(first.schedule.positions())
    for position in positions[:5]:
        first.step(position)
    path = first.checkpoint.write(str(tmp_path / "ckpt"))
    rates = [float(first.step(p).metrics["generator/learning_rate"]) for p in positions[5:]]
    second = Trainer(config)
    second.checkpoint.read(path).assert_existing_objects_matched()
    again = [float(second.step(p).metrics["generator/learning_rate"]) for p in positions[5:]]
    assert again == rates
    assert tf.reduce_all(
        [tf.reduce_all(a == b) for a, b in zip(first.variables, second.variables, strict=True)]
    )

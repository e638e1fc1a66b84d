"""Custom networks by `model.generator` / `model.discriminator` paths, and their errors."""

import pytest
from toytask import run_steps

from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError
from stagegan.training.trainer import Trainer


def trainer(**model):
    raw = {
        "task": "mog2d",
        "batch_size": 8,
        "model": {"latent_dim": 4, "hidden": 8, "layers": 1, **model},
        "stages": [
            {"name": "d", "steps": 1, "updates": [{"train": "discriminator/*", "loss": "d_loss"}]},
            {"name": "g", "steps": 1, "updates": [{"train": "generator/*", "loss": "g_loss"}]},
        ],
    }
    return Trainer(parse_config(raw))


def test_custom_generator_is_built_under_its_scope_and_trained():
    t = trainer(generator="custom_networks:wide")
    paths = [v.path for v in t.variables if v.path.startswith("generator/")]
    assert paths == [
        "generator/a/kernel",
        "generator/a/bias",
        "generator/b/kernel",
        "generator/b/bias",
        "generator/out/kernel",
        "generator/out/bias",
    ]
    assert t.task.generator.count_params() == 4 * 32 + 32 + 32 * 32 + 32 + 32 * 2 + 2
    before = t.task.generator.get_weights()
    run_steps(t)
    after = t.task.generator.get_weights()
    assert all((b != a).any() for b, a in zip(before, after, strict=True))
    # The built-in discriminator is untouched by the generator's replacement.
    assert "discriminator/hidden0/kernel" in [v.path for v in t.variables]


@pytest.mark.parametrize(
    "model, words",
    [
        ({"generator": "custom_networks:three_outputs"}, ["maps (4,) to shape [3]", "needs [2]"]),
        ({"generator": "custom_networks:wrong_input"}, ["cannot take inputs of shape (4,)"]),
        ({"generator": "custom_networks:not_a_model"}, ["returned Dense, not a keras.Model"]),
        ({"generator": "custom_networks:raises"}, ["raised KeyError: 'width_multiplier'"]),
        ({"discriminator": "custom_networks:nope"}, ["has no attribute 'nope'"]),
        ({"discriminator": "no_such_module:d"}, ["cannot import module 'no_such_module'"]),
        ({"generator": "custom_networks"}, ["expected 'package.module:function'"]),
        ({"generator": 3}, ["expected 'package.module:function'"]),
    ],
)
def test_bad_network_paths_name_the_key(model, words):
    with pytest.raises(ConfigError) as error:
        trainer(**model)
    assert error.value.key == f"model.{next(iter(model))}"
    for word in words:
        assert word in str(error.value)


def test_a_task_may_branch_on_tensors_in_python():
    """Stage steps trace without AutoGraph, but a task's own methods are converted: a Python
    `if` on a tensor in `losses` works, and takes the branch the data says."""
    from toytask import G, toy_config

    stages = [{"name": "g", "steps": 1, "updates": [G]}]
    plain = Trainer(parse_config(toy_config(stages, seed=1)))
    branching = Trainer(parse_config(toy_config(stages, seed=1, task="toytask:branching_factory")))
    position = next(iter(plain.schedule.positions()))
    loss = lambda trainer: next(
        float(v) for k, v in trainer.step(position).metrics.items() if k.endswith("/g_loss")
    )
    want = loss(plain)
    assert want > 0 and loss(branching) == pytest.approx(2 * want)


class Builders:
    @staticmethod
    def wide(task):
        return wide_builder(task)


def wide_builder(task):
    import custom_networks

    return custom_networks.wide(task)


def test_objects_given_to_the_api_are_recorded_under_names_a_new_process_can_import(caplog):
    """A top-level function and a static method are recorded as importable names; a lambda
    or a local function is found in this process (with a warning), and in a new process
    (its registry empty) is one ConfigError naming the key, not an AttributeError."""
    from stagegan import tasks

    local = lambda task: wide_builder(task)  # noqa: E731 - the case under test
    names = tasks.register_objects({"a": wide_builder, "b": Builders.wide, "c": local})
    assert names["a"] == "test_custom_models:wide_builder"
    assert names["b"] == "test_custom_models:Builders.wide"
    assert "<lambda>" in names["c"]
    assert "only this process can find" in caplog.text
    assert tasks.load_object(names["c"], "model.generator") is local
    saved = dict(tasks.REGISTERED)
    tasks.REGISTERED.clear()  # as in a new process
    try:
        assert tasks.load_object(names["a"], "model.generator") is wide_builder
        assert tasks.load_object(names["b"], "model.generator") is Builders.wide
        with pytest.raises(ConfigError) as error:
            tasks.load_object(names["c"], "model.generator")
        assert error.value.key == "model.generator"
        assert "no other process can import it" in str(error.value)
    finally:
        tasks.REGISTERED.update(saved)

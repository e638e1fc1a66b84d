"""Config parsing: YAML in, frozen records out; every error names its key."""

import pytest
import yaml

from stagegan.config import apply_overrides, load_config, parse_config, parse_key_path
from stagegan.errors import ConfigError


def base(**changes):
    raw = {
        "name": "t",
        "task": "mog2d",
        "batch_size": 8,
        "optimizers": {"d": {"type": "sgd", "learning_rate": 0.1}},
        "stages": [
            {
                "name": "g",
                "steps": 3,
                "updates": [{"train": "generator/*", "loss": "g_loss"}],
            },
            {
                "name": "joint",
                "steps": 2,
                "mode": "simultaneous",
                "updates": [
                    {"train": ["discriminator/*"], "loss": {"d_loss": 1}, "optimizer": "d"},
                    {"train": ["generator/*"], "loss": {"g_loss": 0.5}, "every": 2},
                ],
            },
        ],
    }
    raw.update(changes)
    return raw


def test_parses_into_records_with_defaults():
    config = parse_config(base())
    assert config.total_steps == 5
    assert config.devices.towers == 1 and config.devices.variables == "/CPU:0"
    g, joint = config.stages
    assert g.mode == "sequential" and joint.mode == "simultaneous"
    assert g.updates[0].train == ("generator/*",) and g.updates[0].loss == (("g_loss", 1.0),)
    assert joint.updates[1].every == 2 and joint.updates[1].loss == (("g_loss", 0.5),)
    # A named optimizer is shared; an omitted one is private to its update (default spec).
    assert joint.updates[0].optimizer == "d" and config.shared == {"d"}
    assert g.updates[0].optimizer == "stages[0].updates[0]"
    assert config.optimizers["stages[0].updates[0]"].type == "adam"
    assert config.optimizers["d"].kwargs() == {"learning_rate": 0.1}
    assert config.checkpoint.every == 1000 and config.checkpoint.keep == 3
    assert (config.log.every, config.log.tensorboard, config.log.histograms) == (100, True, 0)
    assert config.log.progress == "auto"
    # Samples default on, from the run seed, with the task's own count; eval defaults off.
    assert (config.samples.every, config.samples.count) == (500, None)
    assert (config.samples.seed, config.samples.ema) == (config.seed, True)
    assert config.eval is None
    with pytest.raises(AttributeError):
        config.name = "other"  # frozen


def test_saved_config_round_trips():
    config = parse_config(base())
    again = parse_config(yaml.safe_load(config.to_yaml()))
    assert again.stages == config.stages and again.optimizers == config.optimizers


def test_stage_file_by_name_brings_its_optimizers():
    config = parse_config(base(stages="three_phase"))
    assert [s.name for s in config.stages] == ["generator_only", "discriminator_only", "joint"]
    assert config.shared == {"d", "g"}
    assert config.raw["stages"][0]["name"] == "generator_only"  # inlined into the saved config


def test_run_config_optimizers_override_stage_file_ones():
    raw = base(stages="three_phase", optimizers={"d": {"type": "sgd", "learning_rate": 0.5}})
    assert parse_config(raw).optimizers["d"].kwargs() == {"learning_rate": 0.5}


@pytest.mark.parametrize(
    "changes, key, words",
    [
        ({"bogus": 1}, "bogus", "unknown key"),
        ({"batch_size": 0}, "batch_size", "at least 1"),
        ({"batch_size": "8"}, "batch_size", "must be an integer"),
        ({"devices": {"towers": "all"}}, "devices.towers", "'auto'"),
        ({"devices": {"gpus": 2}}, "devices.gpus", "unknown key"),
        ({"log": {"progress": "fancy"}}, "log.progress", "bar, lines"),
        ({"log": {"histograms": -1}}, "log.histograms", "at least 0"),
        ({"log": {"tensorboard": "yes"}}, "log.tensorboard", "true or false"),
        ({"samples": {"every": 1, "size": 4}}, "samples.size", "unknown key"),
        ({"samples": {"count": 0}}, "samples.count", "at least 1"),
        ({"eval": {"count": 3}}, "eval.count", "at least 4"),
        ({"eval": {"features": 3}}, "eval.features", "non-empty string"),
        ({"eval": [1]}, "eval", "mapping"),
        ({"stages": "nope"}, "stages", "no such stage file"),
        ({"stages": []}, "stages", "non-empty list"),
        ({"optimizers": {"d": {"type": "adamax2"}}}, "optimizers.d.type", "unknown optimizer"),
        (
            {"optimizers": {"d": {"type": "sgd", "learning_rate": -1}}},
            "optimizers.d.learning_rate",
            "positive",
        ),
        ({"checkpoint": {"every": -1}}, "checkpoint.every", "at least 0"),
        ({"name": "a b"}, "name", "letters"),
    ],
)
def test_top_level_errors_name_the_key(changes, key, words):
    with pytest.raises(ConfigError) as info:
        parse_config(base(**changes))
    assert info.value.key == key and words in info.value.message


@pytest.mark.parametrize(
    "path, value, key, words",
    [
        ("stages[0].steps", 0, "stages[0].steps", "at least 1"),
        ("stages[0].steps", -5, "stages[0].steps", "at least 1"),
        ("stages[0].mode", "parallel", "stages[0].mode", "sequential, simultaneous"),
        ("stages[0].name", "joint", "stages[1].name", "used twice"),
        ("stages[0].updates", [], "stages[0].updates", "non-empty"),
        ("stages[0].updates[0].train", [], "stages[0].updates[0].train", "pattern"),
        ("stages[0].updates[0].loss", {}, "stages[0].updates[0].loss", "at least one"),
        (
            "stages[0].updates[0].optimizer",
            "e",
            "stages[0].updates[0].optimizer",
            "named optimizers: d",
        ),
        ("stages[0].updates[0].repeat", 0, "stages[0].updates[0].repeat", "at least 1"),
        ("stages[1].updates[0].repeat", 2, "stages[1].updates[0].repeat", "simultaneous"),
        ("stages[0].updates[0].vars", ["x"], "stages[0].updates[0].vars", "unknown key"),
    ],
)
def test_stage_errors_name_the_key(path, value, key, words):
    with pytest.raises(ConfigError) as info:
        parse_config(apply_overrides(base(), [f"{path}={yaml.safe_dump(value).strip()}"]))
    assert info.value.key == key and words in info.value.message


def test_inline_optimizer_type_name_is_private():
    raw = apply_overrides(base(), ["stages[0].updates[0].optimizer=sgd"])
    config = parse_config(raw)
    assert config.stages[0].updates[0].optimizer == "stages[0].updates[0]"
    assert config.optimizers["stages[0].updates[0]"].type == "sgd"


def test_overrides_parse_yaml_and_reach_into_stage_files():
    raw = apply_overrides(
        base(stages="three_phase"),
        ["stages[2].steps=7", "devices.towers=2", "checkpoint.keep=5", "name=renamed"],
    )
    config = parse_config(raw)
    assert config.stages[2].steps == 7 and config.devices.towers == 2
    assert config.checkpoint.keep == 5 and config.name == "renamed"


def test_overrides_reach_the_optimizers_of_a_stage_file():
    raw = base(stages="three_phase")
    raw.pop("optimizers", None)
    config = parse_config(apply_overrides(raw, ["optimizers.g.learning_rate=0.5"]))
    options = config.optimizers["g"].kwargs()  # three_phase's g, with one key changed
    assert config.optimizers["g"].type == "adam"
    assert options == {"learning_rate": 0.5, "beta_1": 0.5}
    assert config.raw["optimizers"]["d"] == {"type": "adam", "learning_rate": 1.0e-4, "beta_1": 0.5}


def test_overrides_reach_into_an_absent_or_null_section():
    # `ema` defaults to null: setting one of its keys enables it with the other defaults.
    for raw in (base(), base(ema=None)):
        config = parse_config(apply_overrides(raw, ["ema.decay=0.9"]))
        assert (config.ema.decay, config.ema.start, config.ema.network) == (0.9, 0, "generator")
    assert parse_config(apply_overrides(base(), ["log.every=7"])).log.every == 7
    evaluated = parse_config(apply_overrides(base(), ["eval.count=300"]))
    assert (evaluated.eval.every, evaluated.eval.count, evaluated.eval.features) == (0, 300, None)
    assert parse_config(apply_overrides(base(samples=None), ["samples.every=0"])).samples.every == 0
    assert parse_config(base(samples=None)).samples is None


@pytest.mark.parametrize(
    "item, key",
    [
        ("nokey", "--set"),
        ("seed.x=1", "seed"),
        ("ema.decay.x=1", "ema.decay"),
        ("devices.gpus.x=1", "devices.gpus"),
        ("stages[9].steps=1", "stages[9]"),
        ("batch_size=[1", "batch_size"),
    ],
)
def test_bad_overrides(item, key):
    with pytest.raises(ConfigError) as info:
        apply_overrides(base(), [item])
    assert info.value.key == key


def test_key_paths():
    assert parse_key_path("stages[1].updates.0.every") == ["stages", 1, "updates", 0, "every"]


def test_broken_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(bad))
    assert info.value.key == "--config" and "broken YAML" in info.value.message
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "missing.yaml"))
    assert "no such file or preset" in info.value.message


def test_default_and_presets_load():
    assert load_config().task
    assert load_config("mog_ring").name == "mog-ring"


def test_set_changes_one_use_of_a_yaml_alias_only(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "task: mog2d\nbatch_size: 8\nstages:\n"
        "  - {name: a, steps: 1, updates: [&d {train: 'discriminator/*', loss: d_loss}]}\n"
        "  - {name: b, steps: 1, updates: [*d]}\n"
    )
    config = load_config(str(path), ["stages[1].updates[0].repeat=3"])
    assert [s.updates[0].repeat for s in config.stages] == [1, 3]

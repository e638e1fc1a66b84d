"""Config parsing: YAML in, frozen records out; every error names its key."""

import time

import pytest
import yaml

import stagegan
from stagegan.config.overrides import parse_key_path
from stagegan.config.schema import apply_overrides, load_config, parse_config
from stagegan.config.yamlfile import yaml_load
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
    assert config.devices.towers == "auto" and config.devices.variables == "auto"
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
    """`config.yaml` holds the values given and the defaults spelled out, and reading it back
    gives the same record, every field of it (the resolved `raw` included)."""
    given = {
        "seed": 7,
        "ema": {"decay": 0.9},
        "eval": {"every": 10, "count": 50},
        "samples": None,
        "checkpoint": {"every": 5, "keep": 2},
        "log": {"every": 2, "tensorboard": False},
    }
    config = parse_config(base(**given))
    saved = yaml.safe_load(config.to_yaml())  # read back by plain PyYAML
    assert [saved[k] for k in ("name", "task", "seed", "batch_size")] == ["t", "mog2d", 7, 8]
    assert saved["samples"] is None and saved["init"] is None
    assert saved["ema"] == {"decay": 0.9, "start": 0, "network": "generator"}
    unset = {"features": None, "batch_size": None, "metrics": None}
    assert saved["eval"] == {"every": 10, "count": 50, **unset}
    assert saved["checkpoint"] == {"every": 5, "keep": 2, "keep_best": None}
    log = saved["log"]
    assert (log["every"], log["tensorboard"], log["histograms"]) == (2, False, 0)
    assert saved["optimizers"] == {"d": {"type": "sgd", "learning_rate": 0.1}}
    assert saved["stages"] == base()["stages"]  # as given: nothing added, nothing lost
    again = parse_config(saved)
    assert again == config
    assert (again.seed, again.ema.decay, again.eval.count, again.checkpoint.keep) == (7, 0.9, 50, 2)


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


# Hardening round 3: what a YAML file or `--set` value may hold, seeds, `--set` into lists.

# The billion laughs: 10**9 leaves from 600 bytes.
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)


def write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def refused(call, key):
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.key == key and "\n" not in str(info.value), str(info.value)
    return info.value.message


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    path = write(tmp_path, BOMB)
    started = time.monotonic()
    message = refused(lambda: load_config(path), "--config")
    assert message.startswith(f"{path} is refused at line 5, column ")
    assert "YAML aliases expand to more than 100,000 values" in message
    stages = write(tmp_path, BOMB + "stages: []\n", "bomb_stages.yaml")
    message = refused(lambda: parse_config(base(stages=stages)), "stages")
    assert message.startswith(f"{stages} is refused at line 5")
    value = "{" + BOMB.strip().replace("\n", ", ") + "}"
    message = refused(lambda: apply_overrides(base(), [f"data={value}"]), "data")
    assert message.startswith("--set value is refused at line 1")
    assert time.monotonic() - started < 2


def test_yaml_limits_on_aliases_nesting_size_and_bytes(tmp_path):
    many = "x: &x 1\ny: [" + ", ".join(["*x"] * 2001) + "]\n"
    assert "more than 2000 YAML aliases" in refused(
        lambda: load_config(write(tmp_path, many)), "--config"
    )
    block = "".join("  " * i + f"k{i}:\n" for i in range(400))
    for deep in ("a: " + "[" * 5000 + "]" * 5000, block):
        message = refused(lambda deep=deep: load_config(write(tmp_path, deep)), "--config")
        assert "YAML nested deeper than 100 levels" in message
    message = refused(lambda: apply_overrides(base(), ["data.x=" + "[" * 3000]), "data.x")
    assert message.startswith("--set value is refused at line 1, column 101")
    # An alias whose anchor holds it would expand forever.
    message = refused(lambda: load_config(write(tmp_path, "data: &a {x: *a}\n")), "--config")
    assert "YAML alias *a is used inside its own anchor" in message
    assert "inside its own anchor" in refused(
        lambda: apply_overrides(base(), ["data=&a [1, *a]"]), "data"
    )
    big = write(tmp_path, "name: x\n" + "#" * (1 << 20))
    assert refused(lambda: load_config(big), "--config") == f"{big} is larger than 1 MiB, the limit"
    png = write(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert refused(lambda: load_config(png), "--config") == (
        f"{png} is not UTF-8 text (byte 0x89 at offset 0)"
    )
    nul = write(tmp_path, "name: x\x00")
    assert refused(lambda: load_config(nul), "--config") == (
        f"{nul} is not YAML text: character #x0000 at offset 7 is not allowed"
    )
    huge = write(tmp_path, "seed: 1" + "0" * 5000)
    assert "Exceeds the limit (4300 digits)" in refused(lambda: load_config(huge), "--config")
    date = write(tmp_path, "name: x\nseed: 2020-13-45\n")
    assert refused(lambda: load_config(date), "--config").endswith(
        "at line 2, column 7: month must be in 1..12"
    )


def test_yaml_within_the_limits_loads_saves_and_loads_again(tmp_path):
    """99 levels and 2000 aliases are fine, through every walk of a config and its saving."""
    deep = "data: {x: " + "[" * 97 + "]" * 97 + "}\n"
    aliases = "model: {x: &x [1, 2], y: [" + ", ".join(["*x"] * 1999) + "]}\n"
    text = yaml.safe_dump(base()) + deep + aliases
    config = load_config(write(tmp_path, text), ["seed=3"])
    again = parse_config(yaml.safe_load(config.to_yaml()))
    assert again.raw == config.raw and len(config.model["y"]) == 1999


def test_api_values_that_yaml_could_not_give_are_refused():
    deep = [[]]
    for _ in range(150):
        deep = [deep]
    loop = {"a": 1}
    loop["self"] = loop
    with pytest.raises(ConfigError) as info:
        stagegan.load({**base(), "data": {"x": deep}})
    assert info.value.key == "config" and "nested deeper than 100 levels" in info.value.message
    with pytest.raises(ConfigError) as info:
        stagegan.load(base(), {"data": loop})
    assert info.value.key == "data" and "holds itself" in info.value.message


def test_a_saved_config_reads_back_as_it_was():
    """Strings that stagegan's loader reads as numbers (`1e-4`) are quoted when saved, and
    YAML's `!!pairs` become lists, so a run folder's config.yaml loads as the run had it."""
    raw = apply_overrides(base(), ["name='1e-4'", "data={x: '2e3', y: !!pairs [a: 1]}"])
    config = parse_config(raw)
    assert config.name == "1e-4" and config.data == {"x": "2e3", "y": [["a", 1]]}
    again = parse_config(yaml_load(config.to_yaml()))
    assert again.raw == config.raw


def test_names_in_error_keys_stay_on_one_line():
    for changes, key in (
        ({"data\nx": 1}, "'data\\nx'"),
        ({"checkpoint": {"a\rb": 1}}, "checkpoint.'a\\rb'"),
        ({"optimizers": {"d\n": {"type": "nope"}}}, "optimizers.'d\\n'.type"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_config(base(**changes))
        assert info.value.key == key, info.value.key
    with pytest.raises(ConfigError) as info:
        apply_overrides(base(), ["data.a\x85b=1"])
    assert info.value.key == "--set" and "malformed key path" in info.value.message


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"seed": 2**32}, "seed"),
        ({"seed": -1}, "seed"),
        ({"samples": {"seed": 2**40}}, "samples.seed"),
    ],
)
def test_seeds_are_32_bit(changes, key):
    with pytest.raises(ConfigError) as info:
        parse_config(base(**changes))
    assert info.value.key == key
    assert parse_config(base(seed=2**32 - 1, samples={"seed": 0})).seed == 2**32 - 1


@pytest.mark.parametrize(
    "item, key, words",
    [
        ("stages[0].steps=5", "stages[0]", "--set: the config has no stages list to index"),
        ("stages[+]={}", "stages[+]", "--set: the config has no stages list to append to"),
    ],
)
def test_set_into_stages_of_a_config_without_them(item, key, words):
    raw = base()
    del raw["stages"]
    with pytest.raises(ConfigError) as info:
        apply_overrides(raw, [item])
    assert (info.value.key, info.value.message) == (key, words)


def test_set_into_a_list_says_what_is_wrong():
    for item, key, message in (
        ("stages[2].steps=5", "stages[2]", "index out of range: stages has 2 items (stages[0] to "),
        ("stages[-3]={}", "stages[-3]", "index out of range: stages has 2 items"),
        ("stages[0].updates[1].every=2", "stages[0].updates[1]", "stages[0].updates has 1 items"),
        ("name[0]=x", "name[0]", "--set: name is not a list. Received: 't'"),
    ):
        with pytest.raises(ConfigError) as info:
            apply_overrides(base(), [item])
        assert info.value.key == key and message in info.value.message, info.value.message
    # A negative index counts from the end, as in Python.
    assert parse_config(apply_overrides(base(), ["stages[-1].steps=9"])).stages[1].steps == 9


def test_an_until_is_its_kinds_declared_fields():
    """Each key of `until:` is a field of its kind with its default and check: the defaults
    the guide states, the kind's own keys only, and the checks naming their keys."""
    from stagegan.config.schema import Plateau, Threshold, parse_until

    plateau = parse_until({"eval": "fid"}, "stages[1].until", 1000)
    assert isinstance(plateau, Plateau)
    assert (plateau.patience, plateau.min_delta, plateau.mode) == (3, 0.0, "auto")
    assert (plateau.check_every, plateau.min_steps, plateau.restore) == (100, 0, None)
    threshold = parse_until({"metric": "d/loss", "below": 0.5}, "stages[0].until", 1000)
    assert isinstance(threshold, Threshold) and (threshold.sign, threshold.value) == ("<", 0.5)
    assert threshold.holds(0.4) and not threshold.holds(0.5)
    for raw, key, words in (
        ({"metric": "d/loss", "below": 1, "patience": 2}, "s.until.patience", "with metric"),
        ({"eval": "fid", "above": 1}, "s.until.above", "with eval"),
        ({"eval": "fid", "min_delta": -1}, "s.until.min_delta", "at least 0"),
        ({"eval": "fid", "restore": "last"}, "s.until.restore", "best"),
        ({"metric": "d/loss"}, "s.until", "exactly one of above or below"),
        ({"eval": "fid", "min_steps": 10}, "s.until.min_steps", "below the stage's steps (10)"),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_until(raw, "s.until", 10)
        assert caught.value.key == key and words in caught.value.message, caught.value


def test_an_update_is_its_declared_fields_settled_for_its_stage():
    """Each key of an update is a field of `Update` with its default and check; `settle`
    names it from its first pattern, scales a lazy one's weights by `every`, and resolves
    its optimizer (named: shared; inline or none: private to it)."""
    from stagegan.config.schema import UPDATE_KEYS, parse_update

    named, optimizers, shared = {"d": {"type": "adam"}}, {}, set()
    raw = {"train": "discriminator/*", "loss": {"d_loss": 1.0, "r1": 0.5}, "every": 4}
    update = parse_update(
        {**raw, "lazy": True}, "s.updates[0]", "sequential", named, optimizers, shared
    )
    assert (update.name, update.repeat, update.every, update.lazy) == ("discriminator", 1, 4, True)
    assert update.loss == (("d_loss", 4.0), ("r1", 2.0)) and update.optimizer == "s.updates[0]"
    assert "s.updates[0]" in optimizers and shared == set()
    named_one = parse_update(
        {**raw, "optimizer": "d"}, "s.updates[1]", "sequential", named, optimizers, shared
    )
    assert (
        named_one.optimizer == "d"
        and shared == {"d"}
        and named_one.loss == (("d_loss", 1.0), ("r1", 0.5))
    )
    assert set(UPDATE_KEYS) == {"train", "loss", "repeat", "every", "lazy", "optimizer", "name"}
    for change, key, words in (
        ({"lazy": True, "every": 1}, "s.u.lazy", "needs every: n > 1"),
        ({"repeat": 2}, "s.u.repeat", "simultaneous"),
        ({"train": []}, "s.u.train", "a pattern or a list"),
        ({"loss": None}, "s.u.loss", "required key is missing"),
        ({"optimizer": "nope"}, "s.u.optimizer", "unknown optimizer 'nope'"),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_update({**raw, **change}, "s.u", "simultaneous", named, {}, set())
        assert caught.value.key == key and words in caught.value.message, caught.value


def test_a_schedule_is_its_kinds_declared_fields():
    """Each key of a learning-rate schedule is a field of its kind (required ones have no
    default); the stated defaults, the kind's own keys only, and a check across fields."""
    from stagegan.config.schema import SCHEDULE_KEYS, SCHEDULES

    def schedule(**value):
        raw = base(optimizers={"d": {"type": "sgd", "learning_rate": value}})
        return parse_config(raw).optimizers["d"].kwargs()["learning_rate"]

    assert set(SCHEDULES) == {"constant", "linear", "cosine", "exponential"}
    assert SCHEDULE_KEYS["exponential"] == (
        ("initial", "steps", "decay_rate"),
        {"warmup": 0, "staircase": False},
    )
    linear = schedule(schedule="linear", initial=0.01, steps=100)
    assert (linear.kind, linear.final, linear.warmup) == ("linear", 0.0, 0)
    assert linear.describe() == "linear(0.01 -> 0 over 100 iterations)"
    decay = schedule(schedule="exponential", initial=0.1, steps=5, decay_rate=0.5, warmup=2)
    assert decay.describe() == "exponential(0.1 x 0.5 every 5 iterations, warm-up 2)"
    where = "optimizers.d.learning_rate"
    for value, key, words in (
        ({"schedule": "cosine", "initial": 0.1}, f"{where}.steps", "required key is missing"),
        ({"schedule": "constant", "initial": 0.1, "steps": 3}, f"{where}.steps", "unknown key"),
        ({"schedule": "linear", "initial": 0.1, "steps": 3, "final": 0.2}, f"{where}.final", "0.1"),
        (
            {"schedule": "exponential", "initial": 0.1, "steps": 3, "decay_rate": 0},
            None,
            "positive",
        ),
        ({"schedule": "linear", "initial": 0.1, "steps": 0}, f"{where}.steps", "at least 1"),
    ):
        with pytest.raises(ConfigError) as caught:
            schedule(**value)
        assert (key is None or caught.value.key == key) and words in caught.value.message, (
            caught.value
        )


def test_a_stage_is_its_declared_fields_with_their_resume_rules():
    """Each key of a stage is a field of `Stage` (its default, check and rule on resume);
    `augment: null` is a value of its own (no augmentation), not the run's default."""
    from stagegan.config.schema import (
        BEFORE_START,
        STAGE_KEYS,
        WHILE_RUNNING,
        stage_resume_rule,
    )

    assert set(STAGE_KEYS) == {
        "name", "steps", "mode", "updates", "until", "augment", "resolution", "fade_in",
        "batch_size",
    }  # fmt: skip
    rules = {name: stage_resume_rule(name) for name in STAGE_KEYS}
    assert rules == {
        **dict.fromkeys(STAGE_KEYS),
        "steps": WHILE_RUNNING,
        "until": BEFORE_START,
        "batch_size": BEFORE_START,
    }
    augment = {"ops": ["xflip"], "p": 0.5}
    raw = base(augment=augment)
    raw["stages"][1] = {**raw["stages"][1], "augment": None}
    config = parse_config(raw)
    assert config.stages[0].augment is not None and config.stages[1].augment is None
    assert (config.stages[0].mode, config.stages[0].resolution, config.stages[0].fade_in) == (
        "sequential",
        None,
        False,
    )
    for change, key, words in (
        ({"steps": None}, "stages[0].steps", "required key is missing"),
        ({"mode": "parallel"}, "stages[0].mode", "must be one of sequential, simultaneous"),
        ({"updates": []}, "stages[0].updates", "non-empty list of updates"),
        ({"fade_in": True}, "stages[0].fade_in", "needs the stage's resolution"),
        ({"resolution": 2}, "stages[0].resolution", "at least 4"),
        ({"name": "joint"}, "stages[1].name", "used twice"),  # the second use is named
    ):
        raw = base()
        raw["stages"][0] = {**raw["stages"][0], **change}
        with pytest.raises(ConfigError) as caught:
            parse_config(raw)
        assert caught.value.key == key and words in caught.value.message, caught.value

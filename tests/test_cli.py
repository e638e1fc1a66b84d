"""The command line: train through a real process, plan, run folders, errors, packaging."""

import os
import subprocess
import sys

import pytest
import yaml
from clihelp import ROOT, TINY, assert_user_error, inprocess, stagegan
from toytask import D, read_checkpoint, toy_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    result = stagegan("train", "--config", "mog_ring", "--run-dir", str(run_dir), *TINY)
    assert result.returncode == 0, result.stderr
    return run_dir, result


def test_train_logs_stages_steps_and_throughput(run):
    _, result = run
    out = result.stdout
    assert "stage 1/3 'generator_only': sequential, 3 steps" in out
    assert "stage 3/3 'joint': simultaneous, 5 steps" in out
    line = next(s for s in out.splitlines() if s.startswith("[joint] step 12/12"))
    assert "(stage 5/5) d_loss=" in line and " g_loss=" in line  # the losses trained on, only
    assert "accuracy" not in line and "grad_norm" not in line and len(line) < 120
    assert "ex/s" in line and "ETA stage 0:00:00, run 0:00:00" in line
    assert result.stderr.strip() == ""


def test_run_folder_holds_resolved_config_and_checkpoints(run):
    run_dir, _ = run
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["stages"][1]["updates"][0]["repeat"] == 2  # stages inlined, overrides applied
    index = yaml.safe_load((run_dir / "checkpoints" / "index.json").read_text())["checkpoints"]
    # Every 2 steps (keep 1), plus every stage end, plus the end of the run.
    assert [(e["step"], e["tags"]) for e in index] == [
        (3, ["stage_end:generator_only"]),
        (7, ["stage_end:discriminator_only"]),
        (10, ["periodic"]),
        (12, ["final", "stage_end:joint"]),
    ]
    leftovers = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert not any(
        name.startswith(("ckpt-00000002", "ckpt-00000004", "ckpt-00000008")) for name in leftovers
    )


def test_checkpoint_counters_match_the_schedule(run):
    run_dir, _ = run
    values = read_checkpoint(run_dir / "checkpoints" / "ckpt-00000012")
    value = lambda name: int(values[f"{name}/.ATTRIBUTES/VARIABLE_VALUE"])
    assert value("global_step") == 12
    # d: 4 steps x repeat 2 in discriminator_only, then 5 joint steps; g: 5 joint steps.
    assert value("optimizer_d/_iterations") == 4 * 2 + 5
    assert value("optimizer_g/_iterations") == 5
    # The generator_only stage had a private optimizer: 3 steps.
    assert value("optimizer_stages_0_updates_0/_iterations") == 3


def test_stage_end_checkpoints_show_isolation(run):
    run_dir, _ = run
    after_g = read_checkpoint(run_dir / "checkpoints" / "ckpt-00000003")
    after_d = read_checkpoint(run_dir / "checkpoints" / "ckpt-00000007")
    names = [n for n in after_g if n.startswith("generator:")]
    assert len(names) == 4  # hidden0 and out, kernel and bias each
    for name in names:  # the discriminator-only stage left every generator weight alone
        assert (after_g[name] == after_d[name]).all(), name


def test_existing_run_folder_is_never_overwritten(run):
    run_dir, _ = run
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    result = stagegan("train", "--config", "mog_ring", "--run-dir", str(run_dir), *TINY)
    assert_user_error(result, "--run-dir", "already exists")
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before


def test_runs_are_numbered_under_runs(tmp_path, monkeypatch):
    from stagegan.cli import main as cli

    monkeypatch.chdir(tmp_path)
    one_step = toy_config([{"name": "d", "steps": 1, "updates": [D]}], "tiny-run")
    one_step.update(samples=None, log={"tensorboard": False})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(one_step))
    for _ in range(2):
        assert cli.main(["train", "--config", "tiny.yaml"]) == 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "00000-tiny-run",
        "00001-tiny-run",
    ]


def test_plan_shows_updates_optimizers_and_dropped_variables(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            toy_config(
                [
                    {
                        "name": "everything",
                        "steps": 4,
                        "updates": [{**D, "train": "*", "every": 2}],
                    },
                    {"name": "d", "steps": 1, "updates": [D]},
                ],
                "p",
                devices={"towers": 2},
                optimizers={"d": {"type": "sgd", "learning_rate": 0.1}},
            )
        )
    )
    result = inprocess("plan", "--config", str(config))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "devices: variables on /CPU:0, 2 towers (/CPU:0, /CPU:1)" in out
    assert "batch 8 (4 per tower)" in out
    assert "NaN/Inf guard: skip (stop after 20 skips in a row)" in out
    assert "stage 0 'everything': 4 steps (global 0..3), mode sequential" in out
    assert "repeat 1, every 2" in out
    assert "optimizer: sgd(learning_rate=0.1), shared 'd' with everything/update, " in out
    assert "variables: 8 (34 parameters)" in out  # G: 2*3+3+3*2+2 = 17; D: 2*4+4+4*1+1 = 17
    assert (
        "no gradient (dropped): generator/hidden/kernel, generator/hidden/bias, "
        "generator/out/kernel, generator/out/bias"
    ) in out
    assert not list(tmp_path.glob("runs"))


def test_plan_budget_times_each_stage_and_sizes_the_run(tmp_path):
    import re

    config = tmp_path / "c.yaml"
    decaying = {"type": "sgd", "learning_rate": {"schedule": "linear", "initial": 0.1,
                                                 "final": 0.0, "steps": 20}}  # fmt: skip
    stages = [
        {"name": "d", "steps": 40, "updates": [D]},
        {"name": "g2", "steps": 20, "updates": [{**D, "optimizer": decaying}]},
    ]
    config.write_text(yaml.safe_dump(toy_config(stages, "p")))
    result = inprocess("plan", "--config", str(config), "--budget", "1h30m")
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("\n\nbudget 1h 30m on this machine")[1]
    per_step = [float(ms) for ms in re.findall(r"([\d.]+) ms a step \(10 timed\)", out)]
    assert len(per_step) == 2 and all(ms > 0 for ms in per_step)
    seconds = (40 * per_step[0] + 20 * per_step[1]) / 1000  # what the config's steps cost
    share = int(re.search(r"the config's 60 steps: about .*, (\d+)% of the budget", out)[1])
    assert share == round(100 * seconds / 5400)
    factor = float(re.search(r"fits about [\d,]+ steps in these proportions \(x([\d.]+)\)", out)[1])
    assert factor == pytest.approx(5400 / seconds, rel=0.01)  # the ms printed to 3 digits
    fitted = [int(n) for n in re.findall(r"--set stages\[\d\]\.steps=(\d+)", out)]
    assert fitted == pytest.approx([40 * factor, 20 * factor], rel=0.02)
    # the second stage's rate decays over the stage: it is given the stage's new length
    decay = re.search(
        r"--set stages\[1\]\.updates\[0\]\.optimizer\.learning_rate\.steps=(\d+)", out
    )
    assert decay and int(decay[1]) == fitted[1]
    assert not list(tmp_path.glob("runs"))


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    """The real process path of a refused run; tests/test_bad_input.py holds the catalogue."""
    result = stagegan("train", "--config", "mog_ring", "--set", "bogus=1", cwd=tmp_path, fresh=True)
    assert_user_error(result, "bogus: unknown key")
    assert not (tmp_path / "runs").exists()  # nothing created for a refused run


def test_broken_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nstages: [\n")
    assert_user_error(inprocess("plan", "--config", str(bad)), "--config", "broken YAML", "line")


def test_installed_package_finds_its_stages_and_configs(tmp_path):
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"

    def pip(*args):
        done = subprocess.run(
            [sys.executable, "-m", "pip", *args, "-q"], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr

    pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(wheel_dir), str(ROOT))
    pip("install", "--no-deps", "--target", str(target), str(next(wheel_dir.glob("*.whl"))))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A preset and a built-in schedule, resolved by the installed copy (what `plan` and
    # `train` read first; building networks needs nothing from the wheel beyond its code).
    script = (
        "import stagegan; from stagegan.config.schema import load_config; "
        "config = load_config('completion_quick', ['stages=glcic']); "
        "print(stagegan.__file__); print(config.stages[2].name, config.stages[2].steps)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    where, stage = result.stdout.splitlines()
    assert where.startswith(str(target)) and stage == "joint 1200"
    # The shapes classifier's weights (eval's offline realism features) ship too.
    assert (target / "stagegan" / "evaluation" / "shapes_net.npz").stat().st_size > 100_000

"""`stagegan compare` (`stagegan.run.compare`): arms x seeds trained into one folder, evaluated
alike, and one table. The toy task's runs (tests/toytask.py) are the arms: their metric, `gap`
(lower is better), is computed again here from each final checkpoint's weights; the wins are
checked against a table made by hand; a comparison killed mid-run (a real process, SIGKILL)
resumes without training or evaluating a finished run again."""

import json
import os
import statistics
import sys

import numpy as np
import pytest
import yaml
import zygote
from clihelp import ROOT, assert_user_error, inprocess
from toytask import EVAL_Z, read_checkpoint, two_stage_config

import stagegan
from stagegan.config.schema import load_config
from stagegan.run import compare

FAST = {"checkpoint": {"every": 2, "keep": 10}}


def toy_yaml(folder, first=2, joint=4):
    """A toy config file: `first` steps of D alone, then `joint` of D and G together."""
    path = folder / f"toy-{first}-{joint}.yaml"
    path.write_text(yaml.safe_dump(two_stage_config("toy", 0, first, joint, **FAST)))
    return str(path)


def gap_by_hand(run_dir):
    """toytask's `gap` from the run's final checkpoint: |mean G(EVAL_Z) - (1, -1)|_1."""
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
    prefix = run_dir / "checkpoints" / index["checkpoints"][-1]["prefix"]
    values = read_checkpoint(prefix)

    def weight(name):
        return values[f"generator:{name}/.ATTRIBUTES/VARIABLE_VALUE"]

    hidden = np.tanh(np.array(EVAL_Z) @ weight("hidden:kernel") + weight("hidden:bias"))
    out = hidden @ weight("out:kernel") + weight("out:bias")
    return float(np.abs(out.mean(axis=0) - [1.0, -1.0]).sum())


def snapshot(folder):
    """`{path: mtime}` of every file under `folder`."""
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_the_wins_read_each_metric_through_its_declared_direction():
    """A table made by hand: fid (lower is better), recall (higher), count (no direction)."""
    arms = (compare.Arm("base", "x"), compare.Arm("new", "x"))
    plan = compare.ComparePlan(
        ROOT, arms, (0, 1, 2), compare.EvalOptions(), ("fid", "recall", "count"), {}, {}, {}
    )
    table = {
        ("base", 0): {"fid": 10.0, "recall": 0.5, "count": 4},
        ("base", 1): {"fid": 12.0, "recall": 0.4, "count": 4},
        ("base", 2): {"fid": 11.0, "recall": None, "count": 4},
        ("new", 0): {"fid": 9.0, "recall": 0.5, "count": 4},  # fid better, recall tied
        ("new", 1): {"fid": 13.0, "recall": 0.6, "count": 4},  # fid worse, recall better
        ("new", 2): {"fid": 10.5, "recall": 0.9, "count": 4},  # fid better; no base recall
    }
    results = {key: {"step": 6, "train_seconds": 1.0, "metrics": m} for key, m in table.items()}
    summary = compare.summarise(plan, results)["summary"]
    fid, recall, count = (summary["new"]["metrics"][name] for name in ("fid", "recall", "count"))
    assert (fid["wins"], fid["ties"], fid["losses"]) == (2, 0, 1)
    assert (recall["wins"], recall["ties"], recall["losses"]) == (1, 1, 0)
    assert "wins" not in count and "wins" not in summary["base"]["metrics"]["fid"]
    assert fid["mean"] == pytest.approx(statistics.fmean([9.0, 13.0, 10.5]))
    assert fid["std"] == pytest.approx(statistics.stdev([9.0, 13.0, 10.5]))
    assert summary["base"]["metrics"]["recall"]["n"] == 2
    markdown = compare.format_table(compare.summarise(plan, results))
    assert "| `new` | 6 | 1 | 10.83 ± 2 (2/3) | 0.6667 ± 0.21 (1/2, 1 tied) | 4 ± 0 |" in markdown
    assert "| `base` | 6 | 1 | 11 ± 1 | 0.45 ± 0.071 [2 of 3] | 4 ± 0 |" in markdown
    assert "fid ↓ | recall ↑ | count |" in markdown


def test_a_set_before_the_first_arm_is_every_arms_and_one_after_an_arm_its_own(tmp_path):
    config = toy_yaml(tmp_path)
    flags = [("set", "batch_size=4"), ("arm", "a=default"), ("set", "model.pack=2")]
    flags += [("arm", f"b={config}"), ("set", "log.every=3"), ("set", "log.every=4")]
    assert compare.arms_from_flags(flags) == [
        compare.Arm("a", "default", ("batch_size=4", "model.pack=2")),
        compare.Arm("b", config, ("batch_size=4", "log.every=3", "log.every=4")),
    ]


def test_steps_are_shared_in_proportion_and_spanning_schedules_follow_their_stage():
    assert compare.proportional([14000, 6000], 100) == [70, 30]
    assert compare.proportional([3, 4, 5], 7) == [2, 2, 3]
    assert compare.proportional([1000, 1], 10) == [9, 1]  # every stage at least one step
    config = load_config("default")  # its polish's own optimizers decay over its 6,000 steps
    assert compare.length_overrides(config, [70, 30]) == [
        "stages[0].steps=70",
        "stages[1].steps=30",
        "stages[1].updates[0].optimizer.learning_rate.steps=30",
        "stages[1].updates[1].optimizer.learning_rate.steps=30",
    ]


def test_budget_sizes_each_arm_with_plans_timing(tmp_path):
    """`prepare` times each arm as `plan --budget` does and fits the budget in the config's
    proportions; nothing is written."""
    config = toy_yaml(tmp_path, 2, 4)
    plan = compare.check([compare.Arm("a", config)], tmp_path / "cmp", (0,), budget=0.2)
    lengths = compare.prepare(plan).lengths["a"]
    assert lengths[1] in (2 * lengths[0], 2 * lengths[0] + 1)  # 2:4, floored a stage each
    assert lengths[0] > 2  # 0.2 s is more than the config's 6 steps
    assert not (tmp_path / "cmp").exists()


def test_compare_trains_evaluates_tabulates_and_grows_a_seed_at_a_time(tmp_path):
    config, output = toy_yaml(tmp_path), tmp_path / "cmp"
    arms = {"slow": config, "fast": (config, {"optimizers.g.learning_rate": 0.05})}
    table = stagegan.compare(arms, output, seeds=(0,), quiet=True)
    first = snapshot(output / "slow-s0")
    # a run stopped before it wrote its config (its folder holds its lock alone): started again
    (output / "fast-s1").mkdir()
    (output / "fast-s1" / ".lock").write_text("12345")
    argv = ["compare", "--output", output, "--seeds", "0,1", "--arm", f"slow={config}"]
    result = inprocess(*argv, "--arm", f"fast={config}", "--set", "optimizers.g.learning_rate=0.05")
    assert result.returncode == 0, result.stderr
    assert snapshot(output / "slow-s0") == first  # finished and evaluated: not touched
    table = json.loads((output / "table.json").read_text())
    gaps = {(r["arm"], r["seed"]): r["metrics"]["gap"] for r in table["runs"]}
    for (arm, seed), gap in gaps.items():
        assert gap == pytest.approx(gap_by_hand(output / f"{arm}-s{seed}"), abs=1e-5)
    assert gaps["slow", 0] != gaps["slow", 1] and gaps["slow", 0] != gaps["fast", 0]
    wins = sum(gaps["fast", s] < gaps["slow", s] for s in (0, 1))
    cell = table["summary"]["fast"]["metrics"]["gap"]
    assert (cell["wins"], cell["wins"] + cell["ties"] + cell["losses"]) == (wins, 2)
    assert cell["mean"] == pytest.approx((gaps["fast", 0] + gaps["fast", 1]) / 2)
    assert table["metrics"] == [{"name": "gap", "mode": "min"}]
    markdown = (output / "table.md").read_text()
    assert f"({wins}/2)" in markdown and markdown.strip() in result.stdout
    assert (output / "samples.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the arms of the first invocation's config and flags, and the folder says so
    changed = inprocess(*argv, "--arm", f"fast={config}")
    assert_user_error(changed, "--arm fast: ", "optimizers.g.learning_rate=0.05")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--arm", "a=CONFIG", "--arm", "a=CONFIG"], ["--arm: two arms are named 'a'"]),
        (["--arm", "a"], ["--arm: expected NAME=CONFIG"]),
        (["--arm", "a=CONFIG", "--set", "stages[7].steps=3"], ["--arm a: stages[7]:"]),
        (["--arm", "a=nothing"], ["--arm a: no such file or preset: 'nothing'"]),
        (["--arm", "a=CONFIG", "--metrics", "gap,fidd"], ["--metrics: no metric 'fidd'"]),
        (["--arm", "a=CONFIG", "--budget", "0.0001s"], ["--budget: too short", "arm 'a'"]),
        (["--arm", "a=CONFIG", "--steps", "1"], ["--steps: arm 'a' has 2 stages"]),
        (["--arm", "a=CONFIG", "--set", "seed=4"], ["--arm a: --set seed=4"]),
        (["--arm", "a=CONFIG", "--seeds", "0,0"], ["--seeds: a seed given twice"]),
        (["--arm", "a=CONFIG", "--features", "selfsup"], ["--features: arm 'a'"]),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(args, words, tmp_path):
    config = toy_yaml(tmp_path)
    args = [a.replace("CONFIG", config) for a in args]
    result = inprocess("compare", "--output", tmp_path / "cmp", *args)
    assert_user_error(result, *words)
    assert not (tmp_path / "cmp").exists()


def test_a_folder_in_a_runs_place_is_refused(tmp_path):
    (tmp_path / "cmp" / "a-s0").mkdir(parents=True)
    (tmp_path / "cmp" / "comparison.json").write_text('{"sizing": {}, "arms": {}}')
    (tmp_path / "cmp" / "a-s0" / "notes.txt").write_text("mine")
    result = inprocess("compare", "--output", tmp_path / "cmp", "--arm", f"a={toy_yaml(tmp_path)}")
    assert_user_error(result, "--output:", "a-s0 is in a run's place but is no run folder")


def test_a_comparison_killed_mid_run_resumes_and_redoes_no_finished_run(tmp_path):
    """SIGKILL after global step 7 of the comparison's second run (arm `long`, 10 steps; arm
    `short` has 6, so its run finished first): the next invocation leaves `short`'s run
    alone, resumes `long`'s from its checkpoint at step 6, and ends as a run never stopped."""
    short, long_ = toy_yaml(tmp_path, 2, 4), toy_yaml(tmp_path, 2, 8)
    output = tmp_path / "cmp"
    argv = ["compare", "--output", str(output), "--seeds", "0"]
    argv += ["--arm", f"short={short}", "--arm", f"long={long_}"]
    killed = zygote.run(
        [sys.executable, str(ROOT / "tests" / "crash_run.py"), "after-step", "7", "--", *argv],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
            "STAGEGAN_TEST_NO_GRAPPLER": "1",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr
    assert (output / "short-s0" / compare.RESULT).exists()
    assert not (output / "long-s0" / compare.RESULT).exists() and not (output / "table.md").exists()
    finished = snapshot(output / "short-s0")
    result = inprocess(*argv)
    assert result.returncode == 0, result.stderr
    assert snapshot(output / "short-s0") == finished
    resumes = (output / "long-s0" / "resume.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in resumes] == [6]
    reference = tmp_path / "reference"
    stagegan.train(long_, ["seed=0"], run_dir=reference, quiet=True)
    table = json.loads((output / "table.json").read_text())
    gaps = {r["arm"]: r["metrics"]["gap"] for r in table["runs"]}
    assert gaps["long"] == pytest.approx(gap_by_hand(reference), abs=1e-6)
    assert [r["step"] for r in table["runs"]] == [6, 10]

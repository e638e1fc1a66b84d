"""Progressive growing against the same networks trained at full resolution from the first
step, at equal wall-clock, on a small colour folder, several seeds.

    python benchmarks/emoji.py /tmp/emoji
    python benchmarks/progressive.py --folder /tmp/emoji --seeds 0,1,2 --json rows.jsonl

Arms (both `configs/pggan_folder.yaml`: the same networks, loss, augmentation, EMA and
optimizers; only the stages differ):
  * `progressive`: the preset's stages as shipped (4 px, then a transition and a stage per
    doubling up to data.size; `--steps` sets their lengths); its training is timed, start-up
    included;
  * `full`: one stage at data.size, given the steps that fill the progressive run's time on
    this machine (its start-up and seconds per step measured first, from a 50- and a 250-step
    run, as `colour.py` does).
Both hold out `--holdout` of the folder and are scored as `colour.py` scores its arms
(`eval --features selfsup --memorisation`, and px_fd on 8x8-pooled pixels), against the
held-out images. `--set KEY=VALUE` applies to both arms (e.g. data.size=64 with the stages
fade64 and r64 appended by `--to 64`; `--to 16` cuts the stages above 16 px); `--steps
400,300,...` gives each stage of that schedule its length (the 64 px comparison
of benchmarks/results/progressive.md: `--to 64 --steps 400,300,300,300,300,300,300,300,300`).
One JSON row per run. `--against batches` compares the progressive arm with the same stages
drawing twice the batch below the final resolution for half their steps (`stages[i].batch_size`).
"""

import argparse
import copy
import json
import time
from pathlib import Path

import yaml
from colour import report, score
from common import stagegan

ROOT = Path(__file__).resolve().parent.parent


def preset(size):
    """The preset's raw stages, grown to `size` (a transition and a stage per doubling
    above the preset's 32 px, of the preset's last two stages' lengths), or cut to it."""
    raw = yaml.safe_load((ROOT / "configs/pggan_folder.yaml").read_text())
    stages = [s for s in raw["stages"] if s["resolution"] <= size]
    side = stages[-1]["resolution"]
    fade, last = stages[-2], stages[-1]
    while side < size:
        side *= 2
        stages.append({**copy.deepcopy(fade), "name": f"fade{side}", "resolution": side})
        stages.append({**copy.deepcopy(last), "name": f"r{side}", "resolution": side})
    return stages


def train(args, run, stages, seed, extra=()):
    sets = [
        f"data.path={args.folder}", "data.channels=3", f"data.holdout={args.holdout}",
        f"data.size={args.to}", f"seed={seed}", f"stages={json.dumps(stages)}",
        f"checkpoint.every={sum(s['steps'] for s in stages)}", *args.set, *extra,
    ]  # fmt: skip
    command = ["train", "--config", "pggan_folder", "--run-dir", str(run)]
    for item in sets:
        command += ["--set", item]
    began = time.perf_counter()
    stagegan(*command)
    return time.perf_counter() - began


def larger_batches(stages, batch):
    """The same stages, those below the final resolution at twice the batch for half the
    steps: the same images shown at each resolution, as the reference sets a minibatch per
    resolution (larger below 64 px) and phases in images shown."""
    top = stages[-1]["resolution"]
    return [
        {**s, "batch_size": 2 * batch, "steps": s["steps"] // 2} if s["resolution"] < top else s
        for s in stages
    ]


def full_stage(stages, steps):
    last = copy.deepcopy(stages[-1])
    return [{**last, "name": f"full{last['resolution']}", "steps": steps}]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--to", type=int, default=32, help="the final resolution")
    parser.add_argument("--steps", help="N,N,...: each stage's steps, in order")
    parser.add_argument("--holdout", type=float, default=0.15)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("runs/progressive"))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--against",
        choices=("full", "batches"),
        default="full",
        help="the other arm: full resolution from the first step at equal wall-clock, or "
        "the progressive stages with twice the batch below the final resolution for half "
        "their steps (the same images shown; its own wall-clock)",
    )
    args = parser.parse_args()
    args.out, args.folder = args.out.resolve(), args.folder.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    stages = preset(args.to)
    if args.steps:
        try:
            lengths = [int(n) for n in args.steps.split(",")]
        except ValueError:
            parser.error(f"--steps: whole numbers separated by commas. Received: {args.steps!r}")
        if min(lengths) < 1:
            parser.error(f"--steps: every stage needs at least 1 step. Received: {args.steps!r}")
        if len(lengths) != len(stages):
            parser.error(
                f"--steps: {len(stages)} stages ({', '.join(s['name'] for s in stages)}), "
                f"{len(lengths)} lengths given"
            )
        stages = [{**s, "steps": n} for s, n in zip(stages, lengths, strict=True)]
    if args.against == "batches":
        batch = yaml.safe_load((ROOT / "configs/pggan_folder.yaml").read_text())["batch_size"]
        for seed in map(int, args.seeds.split(",")):
            for name, arm in (("progressive", stages), ("batches", larger_batches(stages, batch))):
                run = args.out / f"{name}-s{seed}"
                seconds = train(args, run, arm, seed)
                row = {"arm": name, "seed": seed, "steps": sum(s["steps"] for s in arm)}
                report({**row, "train_s": round(seconds), **score(run, args.folder)}, args.json)
        return
    # The full arm's seconds per step from its own log (steps 50 to 250: no tracing), and
    # its start-up (and exit) from the rest of the process's wall-clock.
    run = args.out / "calibrate-full-250"
    wall = train(args, run, full_stage(stages, 250), 0, ["samples=null", "log.every=50"])
    times = {r["step"]: r["time"] for r in map(json.loads, open(run / "metrics.jsonl"))}
    per_step = (times[250] - times[50]) / 200
    start = wall - 250 * per_step
    print(f"full: start-up {start:.0f} s, {per_step * 1000:.0f} ms/step", flush=True)
    for seed in map(int, args.seeds.split(",")):
        runs = {}
        run = args.out / f"progressive-s{seed}"
        seconds = train(args, run, stages, seed)
        runs["progressive"] = (run, seconds, sum(s["steps"] for s in stages))
        steps = int((seconds - start) / per_step)
        run = args.out / f"full-s{seed}"
        last = stages[-1]["steps"]
        runs["full"] = (run, train(args, run, full_stage(stages, steps), seed,
                                   [f"samples.every={last}"]), steps)  # fmt: skip
        for name, (run, seconds, steps) in runs.items():
            row = {"arm": name, "seed": seed, "steps": steps, "train_s": round(seconds)}
            report({**row, **score(run, args.folder)}, args.json)


if __name__ == "__main__":
    main()

"""Presets against each other on a small colour folder, at equal wall-clock, several seeds.

    python benchmarks/emoji.py /tmp/emoji
    python benchmarks/colour.py --folder /tmp/emoji --minutes 10 --seeds 0,1,2 \\
        --arm 'dcgan64=dcgan_clusters;model.width=64' \
        --arm 'resnet16=resnet_clusters;model.width=16'

Equal wall-clock: each arm is first timed on this machine (a 50-step and a 250-step run give
its start-up seconds and seconds per step; `--steps NAME=N` skips that), then given the steps
that fill `--minutes` (80% in the preset's first stage, 20% in its polish). Every run holds out
`--holdout` of the folder (`data.holdout`), so the numbers are against images no run trained on:

  * `stagegan eval --json --features selfsup --memorisation` (as many samples as held-out
    images): fid, kid,
    precision, recall, density, coverage, c2st against the held-out images (in self-supervised
    features trained on them with a fixed seed: the same for every run on the same folder),
    and the memorisation numbers (copies, memorised against its chance level);
  * `px_fd`: the Frechet distance of 8x8 area-averaged RGB pixels (192 numbers) between 1,000
    samples and the held-out images, computed here with numpy.

The arms, so sized, are those of one `stagegan compare` (`OUT/compare`; the timing runs in
`OUT/calibrate-*`), which trains and evaluates every run and writes its table (`table.md`:
mean, spread and wins against the first arm) and `samples.png`. One JSON row per run (`--json`
appends them to a file); a run already there is reused, neither retrained nor evaluated again.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import yaml
from common import ROOT, stagegan  # sets TF_CPP_MIN_LOG_LEVEL before TensorFlow is imported

import stagegan as stagegan_api

METRICS = ("fid", "kid", "precision", "recall", "density", "coverage", "c2st",
           "memorisation/copies", "memorisation/held_out_copies", "memorisation/memorised",
           "memorisation/memorised_chance", "memorisation/nearest_ratio")  # fmt: skip


def decaying(config):
    """The indices of the polish stage's updates whose learning rate is a schedule with its
    own length (`configs/<config>.yaml`, or the file `config`, relative to the repository root
    where the runs start). Read from the file as written: an arm's `;KEY=VALUE` sets that
    replace the polish's optimizers are not seen."""
    if config.endswith(".yaml"):
        path = Path(config) if Path(config).is_absolute() else ROOT / config
    else:
        path = ROOT / "configs" / f"{config}.yaml"
    updates = yaml.safe_load(path.read_text())["stages"][1]["updates"]
    found = []
    for i, update in enumerate(updates):
        optimizer = update.get("optimizer")
        rate = optimizer.get("learning_rate") if isinstance(optimizer, dict) else None
        if isinstance(rate, dict) and "steps" in rate:
            found.append(i)
    return found


def arm_overrides(args, config, sets, steps):
    """The `--set` flags of an arm of `steps` steps (all but the seed)."""
    first = int(round(steps * 0.8))
    overrides = [
        f"data.path={args.folder}", "data.channels=3", f"data.holdout={args.holdout}",
        f"stages[0].steps={first}", f"stages[1].steps={steps - first}",
        f"samples.every={max(1, steps // 4)}", f"checkpoint.every={steps}", *sets,
    ]  # fmt: skip
    # The polish's rates decay to 0 over the polish as this arm's budget sets it (the
    # preset's schedule is 1,500 steps long; before this, a longer polish trained on at rate 0
    # and a shorter one stopped before its rate reached 0).
    overrides += [f"stages[1].updates[{i}].optimizer.learning_rate.steps={steps - first}"
                  for i in decaying(config)]  # fmt: skip
    return overrides


def train(args, run, config, sets, steps, seed):
    command = ["train", "--config", config, "--run-dir", str(run), "--set", f"seed={seed}"]
    for item in arm_overrides(args, config, sets, steps):
        command += ["--set", item]
    began = time.perf_counter()
    stagegan(*command)
    return time.perf_counter() - began


def calibrate(args, name, config, sets):
    """`(start-up seconds, seconds per step)` of an arm, from a 50- and a 250-step run."""
    times = {}
    for steps in (50, 250):
        run = args.out / f"calibrate-{name}-{steps}"  # beside the comparison, in OUT
        times[steps] = train(args, run, config, [*sets, "samples=null"], steps, 0)
    per_step = (times[250] - times[50]) / 200
    return times[50] - 50 * per_step, per_step


def pooled(images):
    """uint8 or [0, 1] float images [N, S, S, 3] -> 8x8 area averages, [N, 192] in [0, 1]."""
    images = np.asarray(images, np.float64)
    images = images / 255.0 if images.max() > 1.5 else images
    n, side = images.shape[0], images.shape[1]
    k = side // 8
    return images.reshape(n, 8, k, 8, k, 3).mean(axis=(2, 4)).reshape(n, -1)


def frechet(a, b):
    """The Frechet distance of Gaussians fitted to rows `a` and `b` (tr sqrt(Ca Cb) as the sum
    of the square roots of the eigenvalues of Ca^1/2 Cb Ca^1/2)."""
    mu = a.mean(0) - b.mean(0)
    ca, cb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    w, v = np.linalg.eigh(ca)
    half = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    root = np.sqrt(np.clip(np.linalg.eigvalsh(half @ cb @ half), 0, None)).sum()
    return float(mu @ mu + np.trace(ca) + np.trace(cb) - 2 * root)


def held_out_images(run, folder):
    """The run's held-out images (its holdout.json), uint8 [N, S, S, 3]."""
    from PIL import Image

    names = json.loads((run / "holdout.json").read_text())["files"]  # the held-out ones
    return np.stack([np.asarray(Image.open(folder / name).convert("RGB")) for name in names])


def score(run, folder):
    """A trained run's row: `eval --json --features selfsup --memorisation` (METRICS) and
    px_fd on 1,000 samples, against the held-out images of `folder`."""
    evaluated = stagegan("eval", "--run", str(run), "--json", "--features", "selfsup",
                         "--memorisation")  # fmt: skip
    metrics = json.loads(evaluated)["metrics"]
    return {**{k: metrics.get(k) for k in METRICS}, "px_fd": pixel_fd(run, folder)}


def pixel_fd(run, folder):
    """px_fd of a trained run: 1,000 samples (`samples.npy`, written once) against the
    held-out images of `folder`."""
    if not (run / "samples.npy").exists():
        stagegan("sample", "--run", str(run), "--num", "1000", "--output",
                 str(run / "samples.npy"))  # fmt: skip
    samples = np.load(run / "samples.npy")
    return frechet(pooled(samples), pooled(held_out_images(run, folder)))


def report(row, path=None):
    """Print a row as JSON, and append it to `path` (JSON lines) when given."""
    print(json.dumps(row), flush=True)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--arm", action="append", required=True, help="NAME=CONFIG[;KEY=VALUE...]")
    parser.add_argument("--steps", action="append", default=[], help="NAME=N: skip timing")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--holdout", type=float, default=0.15)
    parser.add_argument("--out", type=Path, default=Path("runs/colour"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.out, args.folder = args.out.resolve(), args.folder.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    arms = {}
    for spec in args.arm:
        name, _, rest = spec.partition("=")
        config, *sets = rest.split(";")
        if config.endswith(".yaml") and not Path(config).is_absolute():
            config = str(ROOT / config)  # as the runs started in the repository root found it
        arms[name] = (config, [s for s in sets if s])
    given = {k: int(v) for k, _, v in (s.partition("=") for s in args.steps)}
    budget = {}
    for name, (config, sets) in arms.items():
        if name in given:
            budget[name] = given[name]
            continue
        start, per_step = calibrate(args, name, config, sets)
        budget[name] = int((args.minutes * 60 - start) / per_step)
        print(f"{name}: start-up {start:.0f} s, {per_step * 1000:.0f} ms/step -> "
              f"{budget[name]} steps in {args.minutes:g} min", flush=True)  # fmt: skip
    chosen = {
        name: (config, arm_overrides(args, config, sets, budget[name]))
        for name, (config, sets) in arms.items()
    }
    seeds = [int(seed) for seed in args.seeds.split(",")]
    table = stagegan_api.compare(
        chosen, args.out / "compare", seeds=seeds, features="selfsup", memorise=True
    )
    for run in table["runs"]:
        row = {"arm": run["arm"], "seed": run["seed"], "steps": budget[run["arm"]]}
        row["train_s"] = round(run["train_seconds"])
        row.update({key: run["metrics"].get(key) for key in METRICS})
        report({**row, "px_fd": pixel_fd(Path(run["run"]), args.folder)}, args.json)


if __name__ == "__main__":
    main()

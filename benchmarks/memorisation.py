"""Does `eval` tell a run that memorised its images from one that did not?

    python benchmarks/memorisation.py --out /tmp/memorisation              # about 25 minutes
    python benchmarks/memorisation.py --out /tmp/m --counts 400 --steps 2000

For each count N: renders N digits (`examples/digits_folder.py`, seed 1, 32 px grey), trains
the `dcgan_folder` preset on them at 32 px grey with `data.holdout: 0.5` (half the images never
trained on) and no augmentation, for the preset's 7,500 steps (or `--steps`: 80% joint, 20%
polish), and evaluates it as `stagegan eval --features selfsup --memorisation` (every held-out
image, the memorisation numbers of `stagegan.evaluation.memorisation`): one `stagegan compare`
into `OUT/compare`, an arm per N (`digitsN`). Same seed, steps and settings for every N: only
the number of training images changes. Prints one JSON row per run; the runs stay in
`OUT/compare` (reused by a later invocation), each with `nearest.png`, the nearest-neighbour
picture (`eval --nearest`, made once).

Measured 2026-11-26 (2 cores): 400 digits (188 trained on, 212 held out) against 5,000 (2,524
and 2,476), 7,500 steps each:

    trained on  memorised (chance)  memorised_pixels  copies / held_out  pixels: copies / held_out
           188       0.637 (0.470)             0.840      0.491 / 0.344              0.623 / 0.222
         2,524       0.513 (0.505)             0.529      0.100 / 0.105              0.075 / 0.084

and nearest_ratio_pixels / held_out_nearest_ratio_pixels: 0.95 / 1.13 (188), 1.33 / 1.34 (2,524).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import common  # noqa: F401 - sets TF_CPP_MIN_LOG_LEVEL before TensorFlow is imported

import stagegan

ROOT = Path(__file__).resolve().parent.parent
SHOWN = (
    "memorised_chance",
    "memorised",
    "memorised_pixels",
    "copies",
    "held_out_copies",
    "copies_pixels",
    "held_out_copies_pixels",
    "nearest_ratio_pixels",
    "held_out_nearest_ratio_pixels",
)


def digits(out, count):
    """The folder of `count` rendered digits under `out` (written once)."""
    folder = out / f"digits{count}"
    if not folder.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / "digits_folder.py"), str(folder),
             "--count", str(count), "--seed", "1"], check=True,
        )  # fmt: skip
    return folder


def settings(folder, steps):
    """The `--set` flags of the run on the digits of `folder`."""
    found = [
        f"data.path={folder}", "data.size=32", "data.channels=1", "data.holdout=0.5",
        "augment=null", "samples.every=0",
    ]  # fmt: skip
    if steps is not None:
        joint = int(steps * 0.8)
        found += [f"stages[0].steps={joint}", f"stages[1].steps={steps - joint}"]
        found += [f"stages[1].updates[{i}].optimizer.learning_rate.steps={steps - joint}"
                  for i in (0, 1)]  # fmt: skip
    return found


def row(run):
    """A run's JSON row (`table.json`'s run record), its nearest-neighbour picture made
    once (`eval --nearest`: another evaluation, of the same numbers)."""
    nearest = Path(run["run"]) / "nearest.png"
    if not nearest.exists():
        stagegan.load_run(run["run"]).evaluate(features="selfsup", nearest=str(nearest))
    metrics = run["metrics"]
    found = {"count": int(run["arm"].removeprefix("digits"))}
    found["training_images"] = metrics["memorisation/training_images"]
    found.update({key: round(metrics[f"memorisation/{key}"], 3) for key in SHOWN})
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--counts", default="400,5000", help="digits rendered per run")
    parser.add_argument("--steps", type=int, help="steps per run (default: the preset's)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    counts = [int(c) for c in args.counts.split(",")]
    arms = {
        f"digits{n}": ("dcgan_folder", settings(digits(args.out, n), args.steps)) for n in counts
    }
    seed = stagegan.load("dcgan_folder").seed  # the preset's, as before compare set it
    table = stagegan.compare(
        arms, args.out / "compare", seeds=(seed,), features="selfsup", memorise=True
    )
    for run in table["runs"]:
        print(json.dumps(row(run)), flush=True)


if __name__ == "__main__":
    main()

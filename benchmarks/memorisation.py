"""Does `eval` tell a run that memorised its images from one that did not?

    python benchmarks/memorisation.py --out /tmp/memorisation              # about 25 minutes
    python benchmarks/memorisation.py --out /tmp/m --counts 400 --steps 2000

For each count N: renders N digits (`examples/digits_folder.py`, seed 1, 32 px grey), trains
the `dcgan_folder` preset on them at 32 px grey with `data.holdout: 0.5` (half the images never
trained on) and no augmentation, for the preset's 7,500 steps (or `--steps`: 80% joint, 20%
polish), then runs `stagegan eval --features selfsup --nearest` (every held-out image, the
memorisation numbers of `stagegan.evaluation.memorisation`, and the nearest-neighbour picture).
Same seed, steps and settings for every N: only the number of training images changes. Prints
one JSON row per run; the runs, their `eval.jsonl` and `nearest.png` stay in `--out`.

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

from common import stagegan  # sets TF_CPP_MIN_LOG_LEVEL before TensorFlow is imported

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


def one_run(out, count, steps):
    folder, run = out / f"digits{count}", out / f"run{count}"
    if not folder.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / "digits_folder.py"), str(folder),
             "--count", str(count), "--seed", "1"], check=True,
        )  # fmt: skip
    settings = [
        f"data.path={folder}", "data.size=32", "data.channels=1", "data.holdout=0.5",
        "augment=null", "samples.every=0",
    ]  # fmt: skip
    if steps is not None:
        joint = int(steps * 0.8)
        settings += [f"stages[0].steps={joint}", f"stages[1].steps={steps - joint}"]
        settings += [f"stages[1].updates[{i}].optimizer.learning_rate.steps={steps - joint}"
                     for i in (0, 1)]  # fmt: skip
    if not run.exists():
        args = ["train", "--config", "dcgan_folder", "--run-dir", str(run)]
        stagegan(*args, *[part for item in settings for part in ("--set", item)])
    nearest = run / "nearest.png"
    nearest.unlink(missing_ok=True)
    result = stagegan(
        "eval", "--run", str(run), "--features", "selfsup", "--json", "--nearest", str(nearest)
    )
    metrics = json.loads(result)["metrics"]
    row = {"count": count, "training_images": metrics["memorisation/training_images"]}
    row.update({key: round(metrics[f"memorisation/{key}"], 3) for key in SHOWN})
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--counts", default="400,5000", help="digits rendered per run")
    parser.add_argument("--steps", type=int, help="steps per run (default: the preset's)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for count in (int(c) for c in args.counts.split(",")):
        print(json.dumps(one_run(args.out, count, args.steps)), flush=True)


if __name__ == "__main__":
    main()

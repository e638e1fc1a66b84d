"""The completion discriminator's target: the whole completed image fake, or only its hole.

For each seed, trains the config three times from the same seed, with the same stages, steps
and batches, and evaluates the last checkpoint of each with `eval --json`:
  * without: the generator's adversarial terms removed (as `ablation.py` removes them);
  * image:   as given, `loss.adversarial_target: image` (every patch of a completed image fake);
  * hole:    `loss.adversarial_target: hole` (LaMa: patches fake in proportion to the hole).
Arms may add their own overrides (`--image-set`, `--hole-set`). The arms are those of one
`stagegan compare` (`KEEP/compare`, the three configs beside it as `NAME.yaml`): runs already
there are reused, so a table can grow a seed at a time.

    python benchmarks/hole_target.py --config completion_folder --set data.path=DIR \\
        --seeds 0,1,2 --keep runs/hole

Prints, per seed and arm, hole l1, psnr, structure, sharpness, c2st (and fid where `eval` has
it), with each arm's difference from `without` (l1 in percent). The comparison writes its
table (`table.md`, `table.json`: mean, spread and wins against the first arm) and
`samples.png` (held-out completions of each arm's first seed, the same inputs in every arm).
"""

import argparse
from pathlib import Path

import yaml
from ablation import ablated

import stagegan

COLUMNS = ("l1", "psnr", "structure", "sharpness", "c2st", "fid")


def arm_configs(base, with_hole, with_image):
    """`{without, image, hole: raw config}` of the base config and overrides `base`."""
    from stagegan.config.schema import load_config
    from stagegan.tasks import BUILTIN, load_object

    def resolved(extra):
        return load_config(base[0], base[1] + extra).raw

    image = resolved(["loss.adversarial_target=image", *with_image])
    hole = resolved(["loss.adversarial_target=hole", *with_hole])
    task_class = load_object(BUILTIN[image["task"]], "task")
    without, _ = ablated(resolved([]), task_class)
    return {"without": without, "image": image, "hole": hole}


def row(seed, name, values, base):
    cells = [f"{seed:>4}", f"{name:<8}"]
    for column in COLUMNS:
        value = values.get(column)
        if not isinstance(value, (int, float)):
            cells.append(f"{'n/a':>16}")
            continue
        text = f"{value:.4f}" if column in ("l1", "c2st") else f"{value:.2f}"
        if base is not None and name != "without" and isinstance(base.get(column), float):
            if column == "l1":
                text += f" ({100 * (value / base[column] - 1):+.1f}%)"
            else:
                text += f" ({value - base[column]:+.3f})"
        cells.append(f"{text:>16}")
    return " ".join(cells)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="completion_folder")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--hole-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--image-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--arms", default="without,image,hole")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--keep", required=True, help="the runs and their results go here")
    args = parser.parse_args()

    keep = Path(args.keep).resolve()
    keep.mkdir(parents=True, exist_ok=True)
    configs = arm_configs((args.config, args.set), args.hole_set, args.image_set)
    arms = {}
    for name in args.arms.split(","):  # the seed in each is compare's to set
        path = keep / f"{name}.yaml"
        path.write_text(yaml.safe_dump(configs[name], sort_keys=False))
        arms[name] = str(path)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = stagegan.compare(arms, keep / "compare", seeds=seeds)["runs"]
    table = {
        f"{r['seed']}/{r['arm']}": {**r["metrics"], "seconds": r["train_seconds"]} for r in runs
    }
    print(" ".join(["seed", f"{'arm':<8}", *(f"{c:>16}" for c in COLUMNS)]))
    for key, values in table.items():
        seed, name = key.split("/")
        print(row(int(seed), name, values, table.get(f"{seed}/without")))


if __name__ == "__main__":
    main()

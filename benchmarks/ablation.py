"""What a config's adversarial loss does: the run as given against the same run without it.

Trains a config twice from the same seed, with the same stages and steps:
  * as given;
  * with the adversarial terms of its generator updates removed (completion: g_adversarial
    and feature_matching; unconditional and mog2d: g_loss). An update left with no term is
    dropped; the discriminator still trains, so everything else (steps, batches, noise) stays
    the same.
Both are the arms of one `stagegan compare` (`KEEP/compare`, with the two configs beside it
as `with.yaml` and `without.yaml`): the last checkpoint of each evaluated as `eval` does; this
prints both rows and their difference; the comparison's `samples.png` shows both runs' samples
side by side (the same inputs), and a run already there is reused.

    python benchmarks/ablation.py                       # the built-in default
    python benchmarks/ablation.py --config completion_shapes --seed 1 --keep runs/ablation
    python benchmarks/ablation.py --set stages[2].steps=500

The last line is `adversarial ablation: <metric> <with> vs <without>` on the task's realism
metric (completion and unconditional: `fid`, the Fréchet distance in the features `eval`
uses; mog2d: `reverse_kl`), with the direction the metric declares
(`stagegan.evaluation.registry`).
"""

import argparse
import copy
import fnmatch
import json
import tempfile
from pathlib import Path

import common  # noqa: F401 - sets TF_CPP_MIN_LOG_LEVEL before TensorFlow is imported
import yaml

import stagegan
from stagegan.evaluation.evaluate import format_value  # "n/a" for None: undefined for that run


def ablated(raw, task_class):
    """A copy of the resolved config `raw` whose generator updates lose their adversarial
    terms; `(config, removed)` with `removed` a list of `stages[i].updates[j].loss.term`."""
    terms = set(getattr(task_class, "generator_adversarial_terms", ()))
    if not terms:
        raise SystemExit(f"ablation.py: task {raw['task']!r} names no generator adversarial terms")
    raw = copy.deepcopy(raw)
    removed = []
    for i, stage in enumerate(raw["stages"]):
        kept_updates = []
        for j, update in enumerate(stage["updates"]):
            train = update["train"] if isinstance(update["train"], list) else [update["train"]]
            loss = update["loss"] if isinstance(update["loss"], dict) else {update["loss"]: 1.0}
            if any(fnmatch.fnmatchcase("generator/kernel", p) for p in train):
                for term in sorted(terms & set(loss)):
                    removed.append(f"stages[{i}].updates[{j}].loss.{term}")
                loss = {k: v for k, v in loss.items() if k not in terms}
            if loss:
                kept_updates.append({**update, "loss": loss})
        if not kept_updates:
            raise SystemExit(
                f"ablation.py: stage {stage['name']!r} trains only on generator adversarial "
                "terms; without them it has nothing to run"
            )
        stage["updates"] = kept_updates
    if not removed:
        raise SystemExit("ablation.py: no generator update of this config has an adversarial term")
    return raw, removed


def train_and_evaluate(variants, seed, folder):
    """`{name: (train seconds, metrics)}` of `variants` (`{name: raw config}`), each written
    to `folder/NAME.yaml` and an arm of one `stagegan compare` into `folder/compare` from
    `seed`."""
    arms = {}
    for name, raw in variants.items():
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        arms[name] = str(path)
    table = stagegan.compare(arms, folder / "compare", seeds=(seed,))
    return {run["arm"]: (run["train_seconds"], run["metrics"]) for run in table["runs"]}


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def report(with_, without, metric):
    """Both rows and their difference, one metric a line (`n/a`: undefined for that run)."""
    names = [
        k
        for k in with_
        if k in without
        and k not in ("seconds", "count", "held_out")
        and (is_number(with_[k]) or is_number(without[k]))
    ]
    width = max(len(k) for k in names + [metric])
    lines = [f"  {'metric':<{width}}  {'with':>10}  {'without':>10}  {'difference':>10}"]
    for name in names:
        a, b = with_[name], without[name]
        difference = f"{a - b:+.4f}" if is_number(a) and is_number(b) else "n/a"
        lines.append(
            f"  {name:<{width}}  {format_value(a):>10}  {format_value(b):>10}  {difference:>10}"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="a preset or YAML file (default: default)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--seed", type=int, help="the run seed (default: the config's)")
    parser.add_argument(
        "--keep", help="keep the configs and the comparison here (default: temporary)"
    )
    parser.add_argument("--json", help="also write both rows to this JSON file")
    args = parser.parse_args()

    from stagegan.config.objects import find_user_modules
    from stagegan.config.schema import load_config
    from stagegan.errors import ConfigError
    from stagegan.evaluation import registry
    from stagegan.tasks import BUILTIN, load_object

    overrides = list(args.set) + ([f"seed={args.seed}"] if args.seed is not None else [])
    try:
        config = load_config(args.config, overrides)
    except ConfigError as e:
        raise SystemExit(f"ablation.py: {e.key}: {e.message}") from None
    find_user_modules(args.config)  # its own modules, found from its copies in --keep too
    if config.task not in BUILTIN:
        raise SystemExit(f"ablation.py: only built-in tasks ({', '.join(BUILTIN)})")
    task_class = load_object(BUILTIN[config.task], "task")
    metric = "fid" if "fid" in registry.gives(registry.task_metrics(task_class)) else "reverse_kl"
    raw = config.raw
    without_raw, removed = ablated(raw, task_class)
    print(f"config: {args.config or 'default'}, seed {config.seed}, {config.total_steps} steps")
    print(f"without: removed {', '.join(removed)}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep).resolve() if args.keep else Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        found = train_and_evaluate({"with": raw, "without": without_raw}, config.seed, folder)
    rows = {name: {"seconds": round(s, 1), **metrics} for name, (s, metrics) in found.items()}
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    with_, without = rows["with"], rows["without"]
    print(f"time: with {with_['seconds']:.0f}s, without {without['seconds']:.0f}s (training)")
    if with_.get("features"):
        print(f"features: {with_['features']}; {with_.get('count', '?')} held-out samples")
    print(report(with_, without, metric))
    if metric not in with_ or metric not in without:
        raise SystemExit(f"ablation.py: eval reported no {metric!r} for this config")
    # n/a: undefined for that run (mog2d's reverse KL without a single high-quality sample).
    values = (format_value(with_[metric]), format_value(without[metric]))
    better = {"min": "lower", "max": "higher"}.get(registry.lookup(metric).mode, "no direction")
    print(f"adversarial ablation: {metric} {values[0]} vs {values[1]} ({better} is better)")


if __name__ == "__main__":
    main()

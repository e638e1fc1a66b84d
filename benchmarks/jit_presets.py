"""`devices.jit` on every preset: the time to each stage's first step (trace, XLA compile and
the step) and its steps/s, with and without XLA, and what that makes of the whole run.

    python benchmarks/jit_presets.py [--folder DIR] [--labelled DIR] [--presets a b ...]
                                     [--steps 3] [--rounds 3]

One tower with the variables on its device (the layout XLA needs, and the presets' own on one
CPU or GPU). Each stage of a preset is built twice, XLA off and on, in this process; its step
is timed in interleaved rounds (the median). The whole-run estimate is, over the stages,
first step + (steps - 1) x median step. `ratio` is that estimate without XLA over with it
(above 1: XLA pays over the run's whole length). Folder presets read `--folder` (a folder of
images) and the labelled ones `--labelled` (class subfolders:
`examples/digits_folder.py` writes one); a preset whose data is missing is skipped.
"""

import argparse
import time
from pathlib import Path

from common import ROOT, interleaved_medians, stage_runner

FOLDER_PRESETS = {"dcgan_folder", "sngan_folder", "resnet_folder", "pggan_folder"}
FOLDER_PRESETS |= {"completion_folder", "dcgan_clusters", "resnet_clusters"}
LABELLED_PRESETS = {"cdcgan_folder", "cresnet_folder"}


def presets():
    return sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


def overrides(name, args):
    if name in FOLDER_PRESETS:
        return None if args.folder is None else [f"data.path={args.folder}"]
    if name in LABELLED_PRESETS:
        return None if args.labelled is None else [f"data.path={args.labelled}"]
    return []


def build(name, sets, jit):
    from stagegan.config.schema import load_config
    from stagegan.training.trainer import Trainer

    devices = ["devices.towers=[/CPU:0]", "devices.variables=/CPU:0", f"devices.jit={jit}"]
    return Trainer(load_config(name, [*sets, *devices]))


def first_step(trainer, index):
    """Seconds to trace stage `index`, compile it and run its first step."""
    began = time.perf_counter()
    trainer.stage_steps[index].trace()
    stage_runner(trainer, index)()
    return time.perf_counter() - began


def measure(name, sets, steps, rounds):
    """`[(stage, steps, {jit: (first s, median s)})]`, or a string: why XLA failed."""
    trainers = {}
    for jit in (False, True):
        try:
            trainers[jit] = build(name, sets, jit)
        except Exception as error:  # noqa: BLE001 - reported in the table
            return f"jit={jit} fails to build: {str(error).splitlines()[0][:80]}"
    rows = []
    for index, stage in enumerate(trainers[False].config.stages):
        firsts = {}
        for jit, trainer in trainers.items():
            try:
                firsts[jit] = first_step(trainer, index)
            except Exception as error:  # noqa: BLE001
                return f"stage {stage.name!r} with jit={jit}: {str(error).splitlines()[0][:80]}"
        runs = {jit: stage_runner(trainer, index) for jit, trainer in trainers.items()}
        medians = interleaved_medians(runs, steps, rounds)
        rows.append((stage.name, stage.steps, {j: (firsts[j], medians[j]) for j in runs}))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--labelled", type=Path)
    parser.add_argument("--presets", nargs="*", default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'preset':<18} {'stage':<14} {'steps':>6} {'first off':>9} {'first on':>8} "
          f"{'ms off':>8} {'ms on':>8} {'step x':>7}")  # fmt: skip
    totals = []
    for name in args.presets or presets():
        sets = overrides(name, args)
        if sets is None:
            print(f"{name:<18} skipped: no data (--folder / --labelled)")
            continue
        rows = measure(name, sets, args.steps, args.rounds)
        if isinstance(rows, str):
            print(f"{name:<18} {rows}")
            continue
        whole = {False: 0.0, True: 0.0}
        for stage, count, timing in rows:
            for jit, (first, step) in timing.items():
                whole[jit] += first + (count - 1) * step
            (f0, s0), (f1, s1) = timing[False], timing[True]
            print(f"{name:<18} {stage[:14]:<14} {count:>6} {f0:9.1f} {f1:8.1f} "
                  f"{s0 * 1e3:8.1f} {s1 * 1e3:8.1f} {s0 / s1:7.2f}")  # fmt: skip
        totals.append((name, whole))
    print()
    print(f"{'preset':<18} {'run off (s)':>11} {'run on (s)':>10} {'ratio':>6}  XLA pays?")
    for name, whole in totals:
        ratio = whole[False] / whole[True]
        print(f"{name:<18} {whole[False]:11.0f} {whole[True]:10.0f} {ratio:6.2f}  "
              f"{'yes' if ratio > 1.05 else 'no'}")  # fmt: skip


if __name__ == "__main__":
    main()

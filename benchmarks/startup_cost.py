"""What two savings in a step function's trace bring, on a run config's stages, each against
the same code without it:

- `--what adam` (the default): stagegan's fused Adam (`stagegan.core.optimizers.Adam`: one
  `ResourceApplyAdam` per variable) against Keras 3's own Adam;
- `--what spectral`: each spectrally normalised layer's kernel built once per replica's forward
  pass (`stagegan.core.layers.one_pass`) against once per call of the discriminator.

    python benchmarks/startup_cost.py                    # the built-in default, adam
    python benchmarks/startup_cost.py --what spectral --config resnet_folder \
        --set "data={source: shapes, size: 32}"

Two numbers for each, measured in fresh processes (`--rounds` each, alternating):
- start-up: the first step of every stage summed (the trace of its step function and the
  function's first call), what a user waits for before training begins and what most of an
  in-process test costs;
- steady state: the median time of a stage step over `--steps` steps after the first, per
  stage, summed over the stages.
Prints both for each and the ratios new / old (below 1: the saving is faster).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def measure(args):
    """One process: `{"startup": s, "step": s}` for `args.which` ("new" or "old")."""
    import contextlib

    from stagegan.config.schema import load_config
    from stagegan.core import optimizers, replicas
    from stagegan.core.schedule import Position
    from stagegan.training.trainer import Trainer

    if args.which == "old" and args.what == "adam":
        optimizers.CLASSES.clear()
    if args.which == "old" and args.what == "spectral":
        replicas.one_pass = contextlib.nullcontext
    trainer = Trainer(load_config(args.config, args.set))
    startup, step = 0.0, 0.0
    for index, stage in enumerate(trainer.schedule.stages):
        start = trainer.schedule.stage_end(index) - stage.steps
        began = time.perf_counter()
        float(next(iter(trainer.step(Position(start, index, 0)).metrics.values())))
        startup += time.perf_counter() - began
        times = []
        for k in range(1, args.steps + 1):
            began = time.perf_counter()
            float(next(iter(trainer.step(Position(start + k, index, k)).metrics.values())))
            times.append(time.perf_counter() - began)
        step += statistics.median(times)
    print(json.dumps({"startup": startup, "step": step}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="run config or preset (default: default)")
    parser.add_argument("--set", action="append", default=[], help="config overrides")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per stage")
    parser.add_argument("--rounds", type=int, default=3, help="processes per optimizer")
    parser.add_argument("--what", choices=("adam", "spectral"), default="adam")
    parser.add_argument("--which", choices=("new", "old"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.which:
        return measure(args)
    results = {"new": [], "old": []}
    for _ in range(args.rounds):
        for which in results:
            command = [sys.executable, __file__, "--which", which, "--what", args.what]
            command += ["--steps", str(args.steps)]
            if args.config:
                command += ["--config", args.config]
            for override in args.set:
                command += ["--set", override]
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"startup_cost.py --which {which} failed:\n{out.stderr}")
            results[which].append(json.loads(out.stdout.splitlines()[-1]))
    medians = {
        which: {k: statistics.median(r[k] for r in runs) for k in ("startup", "step")}
        for which, runs in results.items()
    }
    names = {"adam": ("fused Adam", "Keras's Adam"), "spectral": ("once a pass", "once a call")}
    print(f"{args.what}: config {args.config or 'default'}, {args.rounds} processes each, median")
    for which, m in medians.items():
        print(
            f"{names[args.what][which == 'old']:13s} start-up {m['startup']:7.2f} s   "
            f"steady state {1000 * m['step']:8.2f} ms per step (all stages)"
        )
    new, old = medians["new"], medians["old"]
    print(
        f"ratio new/old: start-up {new['startup'] / old['startup']:.3f}, "
        f"steady state {new['step'] / old['step']:.3f}"
    )


if __name__ == "__main__":
    main()

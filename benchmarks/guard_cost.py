"""What the NaN/Inf guard costs per step: the same stage timed with `guard.policy: skip` and
with `off`, in one process, interleaved, on this machine.

    python benchmarks/guard_cost.py                 # the default config's last stage
    python benchmarks/guard_cost.py --config mog_ring --stage 2 --steps 200

Prints the median step time of each and their ratio (skip / off). The guard adds, per update
application, a finiteness check of every tower's loss terms and gradients and a `tf.cond`
around `apply_gradients`, plus one small host read per update after the step.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="run config or preset (default: default)")
    parser.add_argument("--stage", type=int, default=-1, help="stage index to time (default: last)")
    parser.add_argument("--steps", type=int, default=30, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per policy")
    parser.add_argument("--set", action="append", default=[], help="config overrides")
    args = parser.parse_args()

    import tensorflow as tf

    from stagegan.config.schema import load_config
    from stagegan.core.schedule import Position
    from stagegan.training.trainer import Trainer

    trainers = {}
    for policy in ("skip", "off"):
        config = load_config(args.config, [*args.set, f"guard.policy={policy}"])
        trainers[policy] = Trainer(config)
    index = args.stage % len(trainers["off"].schedule.stages)
    stage = trainers["off"].schedule.stages[index]
    start = trainers["off"].schedule.stage_end(index) - stage.steps

    def run(trainer, steps):
        began = time.perf_counter()
        for k in range(steps):
            metrics = trainer.step(Position(start + k, index, k)).metrics
        float(next(iter(metrics.values())))  # wait for the last step
        return (time.perf_counter() - began) / steps

    for trainer in trainers.values():  # trace and warm up
        run(trainer, 3)
    times = {policy: [] for policy in trainers}
    for _ in range(args.rounds):
        for policy, trainer in trainers.items():
            times[policy].append(run(trainer, args.steps))
    skip, off = statistics.median(times["skip"]), statistics.median(times["off"])
    device = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    print(
        f"config {args.config or 'default'}, stage {index} {stage.name!r} ({stage.mode}), {device}"
    )
    print(f"guard off:  {off * 1000:8.2f} ms/step (median of {args.rounds} x {args.steps} steps)")
    print(f"guard skip: {skip * 1000:8.2f} ms/step")
    print(f"ratio skip/off: {skip / off:.3f} (guard cost {100 * (skip / off - 1):+.1f}% per step)")


if __name__ == "__main__":
    main()

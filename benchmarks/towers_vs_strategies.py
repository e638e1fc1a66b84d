"""`towers` against `mirrored` and `central_storage` on the same devices, for 1, 2 and 4
towers: examples/sec of the DCGAN pair at 32x32.

    python benchmarks/towers_vs_strategies.py [--kind joint] [--batch 64] [--steps 10] [--rounds 5]

The global batch is fixed (`--batch`) and split across the towers. On a GPU machine the towers
are GPUs (counts above the number of GPUs are skipped); `towers` and `central_storage` keep
the variables on /CPU:0 (the design card's layout), `mirrored` on every GPU. Without a GPU the
CPU is split into 4 logical devices, which share the same cores: there the table shows the
backends' overhead, not a speed-up. Prints the median examples/sec of each, and each
strategy's ratio to `towers`.
"""

import argparse

from common import KINDS, dcgan_config, interleaved_medians, setup_devices, stage_runner

BACKENDS = ("towers", "mirrored", "central_storage")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=list(KINDS), default="joint")
    parser.add_argument("--batch", type=int, default=64, help="the global batch")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    kind, available = setup_devices(max(args.counts))

    from stagegan.config.schema import parse_config
    from stagegan.training.trainer import Trainer

    batches = 2 if args.kind == "alternating" else 1
    print(f"{kind}, DCGAN 32x32 width {args.width}, stage {args.kind}, global batch "
          f"{args.batch}, median of {args.rounds} x {args.steps} steps")  # fmt: skip
    print(
        f"{'towers':>6} " + " ".join(f"{b + ' ex/s':>21}" for b in BACKENDS) + "   ratios to towers"
    )
    last = None
    for count in args.counts:
        if count > available:
            print(f"{count:>6} skipped: only {available} {kind} devices")
            continue
        runs = {}
        for backend in BACKENDS:
            devices = {"towers": count, "variables": "/CPU:0", "strategy": backend}
            config = dcgan_config(devices, args.batch, args.width, kinds=[args.kind])
            runs[backend] = stage_runner(Trainer(parse_config(config)))
        seconds = interleaved_medians(runs, args.steps, args.rounds)
        rate = {b: batches * args.batch / s for b, s in seconds.items()}
        ratios = {b: rate[b] / rate["towers"] for b in BACKENDS[1:]}
        print(f"{count:>6} " + " ".join(f"{rate[b]:21.1f}" for b in BACKENDS) + "   "
              + ", ".join(f"{b} {r:.3f}" for b, r in ratios.items()))  # fmt: skip
        last = (count, ratios)
    if last:
        count, ratios = last
        best = max(ratios, key=ratios.get)
        print(f"ratio best strategy/towers at {count} towers: {best} {ratios[best]:.3f}")


if __name__ == "__main__":
    main()

"""Examples/sec against the number of towers, with a fixed batch per tower (weak scaling).

    python benchmarks/scaling.py [--strategy towers] [--per-tower 32] [--kind joint]

Scaling efficiency is examples/sec at N towers divided by N times examples/sec at 1 tower
(1.0 is linear). On a GPU machine the towers are GPUs. Without a GPU the CPU is split into
logical devices that share its cores, so efficiency there is about 1/N by construction: the
CPU table only shows that adding towers costs little beyond the work itself.
"""

import argparse

from common import KINDS, dcgan_config, interleaved_medians, setup_devices, stage_runner


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--strategy", default="towers", choices=["towers", "mirrored", "central_storage"]
    )
    parser.add_argument("--kind", choices=list(KINDS), default="joint")
    parser.add_argument("--per-tower", type=int, default=32, help="batch per tower")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    kind, available = setup_devices(4)
    counts = [n for n in args.counts if n <= available]

    from stagegan.config.schema import parse_config
    from stagegan.training.trainer import Trainer

    batches = 2 if args.kind == "alternating" else 1
    runs = {}
    for count in counts:
        devices = {"towers": count, "variables": "/CPU:0", "strategy": args.strategy}
        config = dcgan_config(devices, args.per_tower * count, args.width, kinds=[args.kind])
        runs[count] = stage_runner(Trainer(parse_config(config)))
    seconds = interleaved_medians(runs, args.steps, args.rounds)
    print(f"{kind} x{available}, {args.strategy}, DCGAN 32x32 width {args.width}, stage "
          f"{args.kind}, {args.per_tower} per tower, median of {args.rounds} x {args.steps} "
          "steps")  # fmt: skip
    print(f"{'towers':>6} {'batch':>6} {'ms/step':>9} {'ex/s':>9} {'efficiency':>11}")
    base = None
    for count in counts:
        rate = batches * args.per_tower * count / seconds[count]
        base = base or rate
        efficiency = rate / (count * base)
        print(f"{count:>6} {args.per_tower * count:>6} {seconds[count] * 1e3:9.2f} {rate:9.1f} "
              f"{efficiency:11.3f}")  # fmt: skip
    print(f"scaling efficiency at {counts[-1]} towers: {efficiency:.3f} (linear: 1.0)")


if __name__ == "__main__":
    main()

"""The speed effect of `devices.jit` and `devices.mixed_precision`: examples/sec of the DCGAN
pair at 32x32 with each option, against neither, side by side in one process.

    python benchmarks/speed_options.py [--kind joint] [--batch 64] [--steps 10] [--rounds 5]

One tower, with the variables on the tower's device (XLA needs them there): /GPU:0 on a GPU
machine, else /CPU:0. On CPUs mixed precision means bfloat16, which most CPUs compute no
faster than float32; the GPU numbers are the ones that matter for it.
"""

import argparse

from common import KINDS, dcgan_config, interleaved_medians, setup_devices, stage_runner

OPTIONS = {
    "float32": {},
    "jit": {"jit": True},
    "mixed": {"mixed_precision": True},
    "jit+mixed": {"jit": True, "mixed_precision": True},
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=list(KINDS), default="joint")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    kind, _ = setup_devices(1)

    from stagegan.config.schema import parse_config
    from stagegan.training.trainer import Trainer

    device = "/GPU:0" if kind == "GPU" else "/CPU:0"
    runs = {}
    for name, options in OPTIONS.items():
        devices = {"towers": [device], "variables": device, **options}
        config = dcgan_config(devices, args.batch, args.width, kinds=[args.kind])
        runs[name] = stage_runner(Trainer(parse_config(config)))
    seconds = interleaved_medians(runs, args.steps, args.rounds)
    batches = 2 if args.kind == "alternating" else 1
    print(f"{device}, DCGAN 32x32 width {args.width}, stage {args.kind}, batch {args.batch}, "
          f"median of {args.rounds} x {args.steps} steps")  # fmt: skip
    print(f"{'options':<10} {'ms/step':>9} {'ex/s':>9} {'vs float32':>11}")
    for name, value in seconds.items():
        rate = batches * args.batch / value
        print(f"{name:<10} {value * 1e3:9.2f} {rate:9.1f} {seconds['float32'] / value:11.3f}")
    best = min(seconds, key=seconds.get)
    print(f"fastest: {best}, {seconds['float32'] / seconds[best]:.3f}x float32's examples/sec")


if __name__ == "__main__":
    main()

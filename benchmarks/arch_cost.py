"""What each built-in architecture costs per training step: ms per joint step (one
discriminator and one generator update) of `model.arch` dcgan and resnet at 32, 64 and 128 px,
colour, batch 32, on this machine's first device, with the ratio to DCGAN at 32 px measured in
the same run.

    python benchmarks/arch_cost.py [--widths dcgan=64,resnet=16] [--sizes 32,64,128]

The rows are what `benchmarks/results/colour_folders.md` quotes for each preset's cost; on a
GPU the same script gives the GPU numbers.
"""

import argparse

from common import dcgan_config, interleaved_medians, setup_devices, stage_runner


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="dcgan=64,resnet=16")
    parser.add_argument("--sizes", default="32,64,128")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kind, _ = setup_devices(1)

    from stagegan.config.schema import parse_config
    from stagegan.training.trainer import Trainer

    device = "/GPU:0" if kind == "GPU" else "/CPU:0"
    widths = dict(item.split("=") for item in args.widths.split(","))
    runs = {}
    for size in map(int, args.sizes.split(",")):
        for arch, width in widths.items():
            if arch == "dcgan" and size > 64:
                continue
            data = {"source": "shapes", "size": size, "count": 256}
            config = dcgan_config(
                {"towers": [device]}, args.batch, int(width), ["joint"], data=data
            )
            config["model"].update(arch=arch, spectral_norm=True)
            runs[f"{arch}-w{width}-{size}px"] = stage_runner(Trainer(parse_config(config)))
    seconds = interleaved_medians(runs, args.steps, args.rounds)
    base = seconds[next(iter(seconds))]
    print(f"{device}, batch {args.batch}, joint step, median of {args.rounds} x {args.steps}")
    print(f"{'network':<20} {'ms/step':>9} {'vs first':>9}")
    for name, value in seconds.items():
        print(f"{name:<20} {value * 1e3:9.1f} {value / base:9.2f}")


if __name__ == "__main__":
    main()

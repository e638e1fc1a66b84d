"""Write mask images from stagegan's generators, for `data.masks` and `sample --masks`.

    python benchmarks/masks.py OUT --kind wide --size 32 --count 1000 --seed 7
    python benchmarks/masks.py OUT --kind box --names IMAGES   # one mask per image, same names

Masks are PNGs, white in the hole (`stagegan.data.masks`: `box`, LaMa's boxes; `wide`, LaMa's
training masks; `rectangle`, today's single rectangle with sides `--hole-min` to `--hole-max`
of the image). With `--names DIR`, one mask per image of DIR, named as the image (so `sample
--input DIR --masks OUT` pairs them); else `--count` masks named 00000.png, ...
"""

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--kind", choices=("rectangle", "box", "wide"), default="wide")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--names", type=Path, help="one mask per image of this folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hole-min", type=float, default=0.25)
    parser.add_argument("--hole-max", type=float, default=0.5)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from stagegan.data import masks
    from stagegan.data.sources import IMAGE_SUFFIXES
    from stagegan.tasks.completion import draw_holes

    if args.names is not None:
        stems = sorted(
            os.path.splitext(n)[0]
            for n in os.listdir(args.names)
            if n.lower().endswith(IMAGE_SUFFIXES)
        )
    else:
        stems = [f"{i:05d}" for i in range(args.count)]
    rng = tf.random.Generator.from_seed(args.seed)
    if args.kind == "rectangle":
        options = {"hole_min": args.hole_min, "hole_max": args.hole_max, "strokes": 0}
        drawn = draw_holes(rng, len(stems), args.size, options, max(4, args.size // 2))["mask"]
    else:
        drawn = masks.GENERATORS[args.kind](rng, len(stems), args.size)
    pixels = (np.asarray(drawn) * 255).astype(np.uint8)
    args.out.mkdir(parents=True, exist_ok=False)
    for stem, mask in zip(stems, pixels, strict=True):
        (args.out / f"{stem}.png").write_bytes(tf.io.encode_png(mask).numpy())
    share = float(np.asarray(drawn).mean())
    where = f"{args.size} px in {args.out}"
    print(f"{len(stems)} {args.kind} masks of {where} (hole share {share:.3f})")


if __name__ == "__main__":
    main()

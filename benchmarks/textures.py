"""Folders of 32 px grey crops of the photographs scikit-image ships, for the completion
benchmarks (scikit-image is used by this script only, never by stagegan:
`pip install scikit-image`).

    python benchmarks/textures.py OUT        # OUT/train (2,400 crops), OUT/unseen (1,000)
    python benchmarks/textures.py OUT --colour   # colour crops of other photographs
    python benchmarks/ablation.py --config completion_folder \
        --set data.path=OUT/train --keep runs/abl

`train`: crops of brick, grass, gravel, camera, coins, moon, page and text (halved, then a
random 32x32 window each); `unseen`: crops of four other photographs (astronaut, coffee,
chelsea, rocket) that no run trains on: evaluate a run on them by pointing a copy of its
`config.yaml` at `OUT/unseen` and running `stagegan eval`, or complete them with
`stagegan sample --run RUN --input OUT/unseen`.
"""

import argparse
from pathlib import Path

import numpy as np

TRAIN = ("brick", "grass", "gravel", "camera", "coins", "moon", "page", "text")
UNSEEN = ("astronaut", "coffee", "chelsea", "rocket")
# --colour: the colour photographs scikit-image ships without a download.
TRAIN_COLOUR = ("astronaut", "coffee", "immunohistochemistry", "hubble_deep_field", "retina")
UNSEEN_COLOUR = ("chelsea", "rocket")


def grey(name):
    import skimage.data
    from skimage.color import rgb2gray

    image = getattr(skimage.data, name)()
    image = rgb2gray(image[..., :3]) if image.ndim == 3 else image.astype(np.float64)
    return image / 255.0 if image.max() > 1.5 else image


def colour(name):
    import skimage.data

    return getattr(skimage.data, name)()[..., :3] / 255.0


def write_crops(names, count, out, rng, size=32, colours=False):
    from skimage.io import imsave
    from skimage.transform import rescale

    out.mkdir(parents=True)
    load, axis = (colour, -1) if colours else (grey, None)
    images = [rescale(load(name), 0.5, anti_aliasing=True, channel_axis=axis) for name in names]
    for i in range(count):
        image = images[i % len(images)]
        y, x = rng.integers(0, image.shape[0] - size), rng.integers(0, image.shape[1] - size)
        crop = np.clip(image[y : y + size, x : x + size], 0, 1)
        imsave(out / f"{i:05d}.png", (crop * 255).round().astype(np.uint8), check_contrast=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=2400)
    parser.add_argument("--unseen", type=int, default=1000)
    parser.add_argument(
        "--colour",
        action="store_true",
        help=f"colour crops: train on {', '.join(TRAIN_COLOUR)}; unseen: "
        f"{', '.join(UNSEEN_COLOUR)}",
    )
    args = parser.parse_args()
    train, unseen = (TRAIN_COLOUR, UNSEEN_COLOUR) if args.colour else (TRAIN, UNSEEN)
    rngs = np.random.default_rng(0), np.random.default_rng(1)
    write_crops(train, args.train, args.out / "train", rngs[0], colours=args.colour)
    write_crops(unseen, args.unseen, args.out / "unseen", rngs[1], colours=args.colour)
    print(f"{args.train} crops in {args.out / 'train'}, {args.unseen} in {args.out / 'unseen'}")


if __name__ == "__main__":
    main()

"""Write a folder of rendered digits, one subfolder per class (0-9), for trying the
class-conditional preset without downloading a dataset:

    python examples/digits_folder.py DIGITS --count 5000
    python -m stagegan train --config cdcgan_folder --set data.path=DIGITS

Each image is one digit in white on black, drawn with one of the DejaVu fonts that ship with
matplotlib, at a random size, position, rotation and stroke weight (MNIST-like, 32x32 grey).
The same seed writes the same files.
"""

import argparse
import os

import numpy as np
from matplotlib import font_manager
from PIL import Image, ImageDraw, ImageFont

FONTS = ("DejaVu Sans", "DejaVu Serif", "DejaVu Sans Mono")


def draw_digit(digit, rng, size=32, fonts=None):
    """One uint8 [size, size] image of `digit`."""
    fonts = fonts or load_fonts(size)
    scale = 2  # draw at twice the size, then downsample: smooth edges
    canvas = Image.new("L", (size * scale, size * scale), 0)
    font = fonts[rng.integers(len(fonts))][rng.integers(3)]
    ImageDraw.Draw(canvas).text(
        (size * scale / 2, size * scale / 2),
        str(digit),
        fill=255,
        font=font,
        anchor="mm",
        stroke_width=int(rng.integers(0, 3)),
        stroke_fill=255,
    )
    canvas = canvas.rotate(rng.uniform(-15, 15), resample=Image.BILINEAR)
    shift = rng.integers(-3 * scale, 3 * scale + 1, 2)
    canvas = canvas.transform(
        canvas.size, Image.AFFINE, (1, 0, -shift[0], 0, 1, -shift[1]), resample=Image.BILINEAR
    )
    return np.asarray(canvas.resize((size, size), Image.LANCZOS))


def load_fonts(size):
    """Each font family at three sizes, as PIL fonts for drawing at twice `size`."""
    fonts = []
    for family in FONTS:
        path = font_manager.findfont(font_manager.FontProperties(family=family))
        fonts.append([ImageFont.truetype(path, int(size * 2 * s)) for s in (0.6, 0.7, 0.8)])
    return fonts


def write_digits(folder, count, seed=0, size=32, classes=10):
    """Write `count` PNGs, about count / classes per class, into `folder/<digit>/`."""
    rng = np.random.default_rng(seed)
    fonts = load_fonts(size)
    for digit in range(classes):
        os.makedirs(os.path.join(folder, str(digit)), exist_ok=True)
    for index in range(count):
        digit = index % classes
        image = draw_digit(digit, rng, size, fonts)
        Image.fromarray(image).save(os.path.join(folder, str(digit), f"{index:06d}.png"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    write_digits(args.folder, args.count, args.seed, args.size)
    print(f"wrote {args.count} digits to {args.folder}")


if __name__ == "__main__":
    main()

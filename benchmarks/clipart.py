"""A colour folder of drawings of many kinds for the benchmarks: Debian's Open Clip Art
Library PNGs (`apt-get install openclipart-png`, about 8,100 files in 22 topics; used by the
benchmarks only, never by stagegan), or Tux Paint's stamps (`tuxpaint-stamps-default`).

    python benchmarks/clipart.py OUT                  # OUT/<name>.png, 32 px, every drawing
    python benchmarks/clipart.py OUT --count 4500     # the first 4,500 of a fixed shuffle
    python benchmarks/clipart.py OUT --source tuxpaint

Each drawing is composited on white (its alpha), cropped to its ink, centred on a square white
canvas with a 6% margin and resized with Lanczos; blank drawings and exact duplicates (the
library files many drawings under two topics) are left out.
"""

import argparse
import hashlib
from pathlib import Path

import numpy as np

SOURCES = {
    "openclipart": "/usr/share/openclipart/png",
    "tuxpaint": "/usr/share/tuxpaint/stamps",
}


def drawing(path, size):
    """uint8 [size, size, 3] of the drawing at `path`, or None (blank or unreadable)."""
    from PIL import Image

    try:
        with Image.open(path) as opened:
            if opened.width * opened.height > 4096 * 4096:
                return None
            rgba = opened.convert("RGBA")
    except Exception:  # noqa: BLE001 - a broken file of the library
        return None
    canvas = Image.new("RGBA", rgba.size, "white")
    canvas.alpha_composite(rgba)
    array = np.asarray(canvas.convert("RGB"))
    ink = np.argwhere((array < 245).any(axis=-1))
    if len(ink) < 50:
        return None
    (top, left), (bottom, right) = ink.min(0), ink.max(0) + 1
    glyph = canvas.convert("RGB").crop((left, top, right, bottom))
    side = int(max(glyph.size) * 1.12)
    square = Image.new("RGB", (side, side), "white")
    square.paste(glyph, ((side - glyph.size[0]) // 2, (side - glyph.size[1]) // 2))
    return np.asarray(square.resize((size, size), Image.LANCZOS))


def drawings(source="openclipart", size=32, count=None):
    """`{name: uint8 [size, size, 3]}`: every distinct drawing of `source`, or the first
    `count` of a fixed shuffle of the files."""
    files = sorted(Path(SOURCES[source]).rglob("*.png"))
    order = np.random.default_rng(0).permutation(len(files))
    seen, out = set(), {}
    for index in order:
        image = drawing(files[index], size)
        if image is None:
            continue
        digest = hashlib.sha1(image.tobytes()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        out[f"{files[index].parent.name}-{files[index].stem}"] = image
        if count is not None and len(out) >= count:
            break
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=32, help="the side in pixels (32)")
    parser.add_argument("--count", type=int, default=None, help="at most this many (all)")
    parser.add_argument("--source", choices=sorted(SOURCES), default="openclipart")
    args = parser.parse_args()
    from PIL import Image

    args.out.mkdir(parents=True)
    images = drawings(args.source, args.size, args.count)
    for name, image in images.items():
        Image.fromarray(image).save(args.out / f"{name[:80]}.png")
    print(f"{len(images)} drawings in {args.out}")


if __name__ == "__main__":
    main()

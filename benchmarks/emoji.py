"""A small colour folder of many kinds for the benchmarks: the single-code-point emoji of
Debian's Noto Color Emoji font, one 32 px image each (`apt-get install
fonts-noto-color-emoji`; used by the benchmarks only, never by stagegan).

    python benchmarks/emoji.py OUT            # OUT/<emoji code>.png, about 1,400 images
    python benchmarks/emoji.py OUT --size 64  # the same at 64 px

Each glyph is drawn at the font's bitmap size (109 px) on white, cropped to its box, centred
on a square white canvas with a 6% margin and resized to 32 px with Lanczos; blank glyphs and
exact duplicates are left out.
"""

import argparse
import hashlib
from pathlib import Path

import numpy as np

FONT = "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"
RANGES = ((0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
          (0x1FA70, 0x1FAFF), (0x2600, 0x27BF))  # fmt: skip


def glyphs(size=32):
    """`{code: uint8 [size, size, 3]}` of every drawable emoji of `RANGES`."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(FONT, 109)
    seen, out = set(), {}
    for low, high in RANGES:
        for code in range(low, high + 1):
            canvas = Image.new("RGB", (160, 160), "white")
            ImageDraw.Draw(canvas).text((10, 10), chr(code), font=font, embedded_color=True)
            array = np.asarray(canvas)
            ink = np.argwhere((array < 250).any(axis=-1))
            if len(ink) < 50:  # blank: no glyph for this code point
                continue
            (top, left), (bottom, right) = ink.min(0), ink.max(0) + 1
            glyph = canvas.crop((left, top, right, bottom))
            side = int(max(glyph.size) * 1.12)
            square = Image.new("RGB", (side, side), "white")
            square.paste(glyph, ((side - glyph.size[0]) // 2, (side - glyph.size[1]) // 2))
            image = np.asarray(square.resize((size, size), Image.LANCZOS))
            digest = hashlib.sha1(image.tobytes()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                out[code] = image
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=32, help="the side in pixels (32)")
    args = parser.parse_args()
    from PIL import Image

    args.out.mkdir(parents=True)
    images = glyphs(args.size)
    for code, image in images.items():
        Image.fromarray(image).save(args.out / f"u{code:05x}.png")
    print(f"{len(images)} emoji in {args.out}")


if __name__ == "__main__":
    main()

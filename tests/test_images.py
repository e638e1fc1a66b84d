"""The one image reader (`stagegan.data.images`): every path that opens an image reads the
header first and refuses an image of more pixels than the bound set from the run's size
(hardening round 5: a 20000 x 20000 PNG of a few hundred KB ended in Pillow's
`DecompressionBombError` and a traceback from `data.channels: auto`'s peek)."""

import logging
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from stagegan.data import images as reader
from stagegan.data import sources as data
from stagegan.data.masks import load_masks
from stagegan.errors import ConfigError


def png_header(width, height, rows=1):
    """A grey PNG that says it is `width` x `height` (only `rows` rows of pixels follow: the
    header is what the reader reads; a whole bomb of zeros has the same header)."""

    def chunk(tag, payload):
        crc = zlib.crc32(tag + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\0" * (width + 1) * rows)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def test_the_bound_grows_with_the_side_between_8192_and_16384_squared():
    assert reader.pixel_limit(32) == 8192 * 8192 == 67_108_864  # the floor
    assert reader.pixel_limit(128) == 8192 * 8192  # 64 x 128 = 8192
    assert reader.pixel_limit(200) == 12_800 * 12_800
    assert reader.pixel_limit(256) == reader.pixel_limit(4096) == 16_384 * 16_384  # the cap


@pytest.mark.parametrize(
    "width, height, size, reason",
    [
        (8192, 8192, 32, None),
        (8193, 8192, 32, "8193x8192 pixels, over the 67,108,864 read at 32 px"),
        (13000, 13000, 32, "13000x13000 pixels, over the 67,108,864 read at 32 px"),
        (13000, 13000, 256, None),
        # past Pillow's own hard limit (2 x 89,478,485): its error, read for the count
        (20000, 20000, 32, "400,000,000 pixels, over the 67,108,864 read at 32 px"),
    ],
)
def test_the_header_decides_before_any_decoding(width, height, size, reason):
    found = reader.check_header(png_header(width, height), size)
    assert found == reason if reason is None else found.startswith(reason), found


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"", "not a readable regular file"),
        (b"\x89PNG\r\n\x1a\n", "not an image (UnidentifiedImageError)"),
        (b"GIF89a" + b"\xff" * 3, "not an image"),
        (b"\xff\xd8\xff\xe0" + b"\0" * 20, "not an image"),
    ],
)
def test_a_broken_header_is_a_reason_not_an_exception(raw, words):
    assert reader.check_header(raw, 32).startswith(words)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("bombs")
    for i in range(3):
        pixels = np.full((12, 12, 3), 60 * i + 10, np.uint8)
        pixels[..., 2] = 200  # in colour
        Image.fromarray(pixels).save(root / f"{i}.png")
    (root / "big.png").write_bytes(png_header(20000, 20000))
    (root / "just_under_pillow.png").write_bytes(png_header(13000, 13000))
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return root


def test_loading_skips_a_bomb_with_one_warning_naming_the_key_and_the_size(folder, caplog):
    files = sorted(str(p) for p in folder.iterdir())
    with caplog.at_level(logging.WARNING, logger="stagegan"):
        images, ok = data.decode_files(files, 8, 3, key="--input")
    assert ok.tolist() == [True, True, True, False, False, False]  # 0-2, big, broken, just_under
    assert images[ok][:, 0, 0, 0].tolist() == [10, 70, 130]  # fitted as read
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    big = [line for line in lines if "big.png" in line][0]
    assert big.startswith("--input: skipped unreadable image ") and "400,000,000 pixels" in big
    under = [line for line in lines if "just_under" in line][0]
    assert "13000x13000 pixels, over the 67,108,864 read at 8 px" in under


def test_channels_auto_peeks_past_a_bomb(folder):
    """`data.channels: auto` looked with Pillow through a second path that decoded an image
    whole before knowing its size; it now reads through the one reader."""
    options = {**data.DEFAULTS, "source": "folder", "path": str(folder), "size": 8}
    peeked = data.source_of(options).peek()
    assert [image is None for image in peeked] == [False, False, False, True, True, True]
    channels, words = data.decide_channels({**options, "channels": "auto"})
    assert channels == 3 and words == "3 of the 3 images looked at are in colour"


def test_a_bomb_among_masks_is_refused_naming_the_flag_and_why(tmp_path):
    mask = np.zeros((8, 8), np.uint8)
    mask[2:5, 2:5] = 255
    Image.fromarray(mask).save(tmp_path / "a.png")
    (tmp_path / "b.png").write_bytes(png_header(9000, 9000))
    with pytest.raises(ConfigError) as caught:
        load_masks(str(tmp_path), 8, key="--masks")
    assert caught.value.key == "--masks"
    assert caught.value.message == (
        f"cannot read mask b.png in {tmp_path} (9000x9000 pixels, over the 67,108,864 read at "
        "8 px (a decompression bomb?))"
    )


def test_record_bytes_are_checked_too():
    good = png_header(8, 8, rows=8)
    assert reader.checked_bytes(good, 32) == good
    assert reader.checked_bytes(png_header(9000, 9000), 32) == b""
    assert reader.peek_bytes(png_header(9000, 9000), 32) is None
    assert reader.peek_bytes(good, 32).shape == (8, 8, 3)


def test_reading_a_finished_run_drops_the_advice_for_training_it(caplog):
    """`sample`/`eval` on a run trained on a small folder printed `data.path: ... memorises
    them` before their own one line (hardening round 5): advice to a run about to train."""
    from stagegan.data.sources.base import check_count
    from stagegan.run.reading import _advice_dropped

    with caplog.at_level(logging.WARNING, logger="stagegan"):
        check_count(40, 8, "imgs")
        with _advice_dropped():
            check_count(40, 8, "imgs")
            logging.getLogger("stagegan").warning("kept")
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "data.path: imgs has only 40 images",
        "kept",
    ]

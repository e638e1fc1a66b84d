"""Shared by the benchmarks: device set-up, the DCGAN run config, timing."""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ADAM = {"type": "adam", "learning_rate": 2.0e-4, "beta_1": 0.5}
UPDATES = {
    "d": {"name": "d", "train": "discriminator/*", "loss": "d_loss", "optimizer": "d"},
    "g": {"name": "g", "train": "generator/*", "loss": "g_loss", "optimizer": "g"},
}
KINDS = {
    "g_only": ("sequential", ["g"]),
    "d_only": ("sequential", ["d"]),
    "alternating": ("sequential", ["d", "g"]),
    "joint": ("simultaneous", ["d", "g"]),
}


def setup_devices(cpus):
    """Split the CPU into `cpus` logical devices when there is no GPU (before TensorFlow
    starts). Returns `(kind, count)`: "GPU" and the GPU count, or "CPU" and `cpus`."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        return "GPU", len(gpus)
    from stagegan.core.placement import split_cpu

    split_cpu(cpus)
    return "CPU", cpus


def dcgan_config(devices, batch, width=64, kinds=tuple(KINDS), policy="skip", data=None):
    """The unconditional DCGAN pair at 32x32 (BatchNorm on), one stage per kind in `kinds`."""
    return {
        "name": "benchmark",
        "task": "unconditional",
        "data": data or {"source": "shapes", "size": 32, "count": 2048},
        "model": {"latent_dim": 64, "width": width, "batchnorm": True},
        "batch_size": batch,
        "devices": devices,
        "optimizers": {"g": ADAM, "d": ADAM},
        "stages": [
            {
                "name": kind,
                "steps": 1,
                "mode": KINDS[kind][0],
                "updates": [UPDATES[u] for u in KINDS[kind][1]],
            }
            for kind in kinds
        ],
        "log": {"tensorboard": False},
        "samples": None,
        "guard": {"policy": policy},
    }


def timed(run, steps):
    """Seconds per call of `run` over `steps` calls (waits for the last result)."""
    began = time.perf_counter()
    for _ in range(steps):
        result = run()
    values = getattr(result, "metrics", result)  # a stage step's StepOutput, or a dict
    float(next(iter(values.values())))
    return (time.perf_counter() - began) / steps


def interleaved_medians(runs, steps, rounds):
    """`{name: median seconds per call}`, rounds interleaved across `runs` (after a warm-up)."""
    for run in runs.values():
        timed(run, steps)
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(timed(run, steps))
    return {name: statistics.median(values) for name, values in times.items()}


def stage_runner(trainer, index=0):
    """A call running stage `index`'s step once (the stage's own step counter stays at 0)."""
    from stagegan.core.schedule import Position

    position = Position(index, index, 0)
    return lambda: trainer.step(position)


ROOT = Path(__file__).resolve().parent.parent


def stagegan(*args):
    """Run `python -m stagegan ARGS` from the repository root, with benchmarks/ on the import
    path (a run whose config names a benchmark's module, `task: fastgan:FastGAN`, is then
    evaluated and sampled too); its stdout, or exit with its stderr when it fails."""
    path = os.pathsep.join(p for p in (str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, "-m", "stagegan", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        name = Path(sys.argv[0]).name
        raise SystemExit(f"{name}: stagegan {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout

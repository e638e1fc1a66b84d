"""Peak memory of `stagegan eval` against the number of images evaluated.

A completion run at 128 px (GLCIC's networks at `completion_quick` width, on the `shapes`
source) is trained for three steps; then `eval` runs in a fresh process at `--count` 64 and
512, with the default chunk (the run's batch size, 8) and with 256 images per forward pass
(what stagegan did before chunks followed the batch size). Each process's peak RSS is
measured (`getrusage` of the child). Prints the ratio of 512 to 64 images for both.

    python benchmarks/eval_memory.py            # about 3 minutes on 2 CPU cores

Target: with the default chunk, peak memory is flat in the count (ratio <= 1.3).
"""

import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (64, 512)


def stagegan(*args):
    result = subprocess.run(
        [sys.executable, "-m", "stagegan", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise SystemExit(result.stderr[-2000:])
    return result.stdout


def peak_rss_mb(*args):
    """Peak RSS (MB) of one `python -m stagegan ARGS` process, measured in a wrapper process
    (RUSAGE_CHILDREN holds the largest child of the process asking)."""
    code = (
        "import resource, subprocess, sys; "
        f"r = subprocess.run([sys.executable, '-m', 'stagegan', *{list(map(str, args))!r}], "
        "capture_output=True); "
        "sys.exit(r.returncode) if r.returncode else "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    return int(out.stdout.strip()) / 1024.0


def completion_run(folder):
    """A 3-step completion run at 128 px in `folder`/run; returns its path."""
    run = Path(folder) / "run"
    stagegan(
        "train",
        "--config",
        "completion_quick",
        "--run-dir",
        run,
        "--set",
        "data={source: shapes, size: 128, count: 1400}",
        "--set",
        "batch_size=8",
        *[f"--set=stages[{i}].steps=1" for i in range(3)],
        "--set",
        "samples=null",
        "--set",
        "eval=null",
        "--set",
        "log.tensorboard=false",
    )
    return run


def eval_peaks(run, *extra):
    """Peak RSS (MB) of `eval` at each of `COUNTS`."""
    return [peak_rss_mb("eval", "--run", run, "--count", c, *extra) for c in COUNTS]


def main():
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >= 0
    with tempfile.TemporaryDirectory() as folder:
        run = completion_run(folder)
        print("completion, 128 px, batch 8: peak RSS of one `eval` process (MB)")
        print(
            f"{'images per pass':>16} | " + " | ".join(f"count {c:>4}" for c in COUNTS) + " | ratio"
        )
        for label, extra in (("8 (default)", []), ("256", ["--batch-size", 256])):
            peaks = eval_peaks(run, *extra)
            cells = " | ".join(f"{p:10.0f}" for p in peaks)
            print(f"{label:>16} | {cells} | {peaks[-1] / peaks[0]:.2f}")


if __name__ == "__main__":
    main()

"""`python -m stagegan`, with a real fault injected at a chosen moment (for crash tests).

    python tests/crash_run.py WHEN STEP -- train --resume RUN ...

WHEN is one of:
    after-step    SIGKILL right after global step STEP's updates: nothing of it written
    after-index   SIGKILL right after checkpoint STEP is listed in index.json
    before-index  SIGKILL after checkpoint STEP's files are written, before the index lists it
    mid-write     SIGKILL from another thread while checkpoint STEP's files are being written
    sigterm       SIGTERM (a graceful stop) to itself right after global step STEP
"""

import os
import signal
import sys
import threading
import time

from stagegan.cli import main as cli
from stagegan.runfolder.checkpoints import CheckpointStore
from stagegan.training import trainer as training


def kill(signum=signal.SIGKILL):
    os.kill(os.getpid(), signum)


def main():
    when, step, separator, *argv = sys.argv[1:]
    assert separator == "--", sys.argv
    step = int(step)
    prefix = f"ckpt-{step:08d}"
    if when in ("after-step", "sigterm"):
        signum = signal.SIGKILL if when == "after-step" else signal.SIGTERM
        run_step = training.Trainer.step

        def step_then_signal(self, position, with_gradients=False, check=True):
            metrics = run_step(self, position, with_gradients, check)
            if position.global_step + 1 == step:
                kill(signum)
            return metrics

        training.Trainer.step = step_then_signal
    elif when in ("after-index", "before-index"):
        write_index = CheckpointStore._write_index

        def index_then_kill(self, entries):
            listing = any(e["prefix"] == prefix for e in entries)
            if listing and when == "before-index":
                kill()
            write_index(self, entries)
            if listing:
                kill()

        CheckpointStore._write_index = index_then_kill
    elif when == "mid-write":
        write = CheckpointStore._write

        def write_while_killed(self, name):
            if name != prefix:
                return write(self, name)
            threading.Thread(target=lambda: (time.sleep(0.001), kill())).start()
            result = write(self, name)
            time.sleep(5)  # the kill lands during the write, or here: never after the index
            return result

        CheckpointStore._write = write_while_killed
    else:
        raise SystemExit(f"unknown WHEN {when!r}")
    if os.environ.get("STAGEGAN_TEST_NO_GRAPPLER"):
        # As in the test processes (tests/conftest.py), for a run compared with one trained in
        # process: Grappler's rewrites may round differently (1 ulp was seen on AVX-512).
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    sys.exit(cli.main(argv))


if __name__ == "__main__":
    main()

"""What stops a training run besides its schedule: the NaN guard (`flush_guard` acts on its
results), SIGINT and SIGTERM (`StopSignals`), a multi-worker step that waits too long for a
silent peer (`PeerDeadline`), and TensorFlow's errors of a lost server or peer (their one-line
messages). `say_and_exit` ends the process at once from any thread, removing the `TEMPORARY`
folders."""

import collections
import functools
import os
import re
import shutil
import signal
import statistics
import sys
import threading
import time

import tensorflow as tf

from stagegan.config.cluster import PATIENCE
from stagegan.errors import PeerLost
from stagegan.runfolder.dirs import RunFolder
from stagegan.runfolder.logs import append_jsonl


def flush_guard(trainer, run_dir):
    """Act on the NaN guard's collected results (`Guard.flush`: may raise `GuardStop`) and
    append its records to guard.jsonl. Steps still running on workers (`parameter_server`)
    finish first: whatever reads the run's state after this reads every step before it."""
    trainer.join()
    try:
        trainer.guard.flush()
    finally:
        for event in trainer.guard.events:
            append_jsonl(run_dir / RunFolder.GUARD, event)
        trainer.guard.events.clear()


class StopSignals:
    """While active, SIGINT and SIGTERM only set `received` (the signal number), so the loop
    can finish its step and write a checkpoint. A second signal acts as usual (the handlers
    are restored after the first). Outside the main thread it does nothing.

    A step that cannot finish (its input blocks, a device hangs) must not make the signal
    wait forever, and while the main thread is blocked inside TensorFlow, Python runs no
    signal handler. So a watcher thread learns of the signal through `signal.set_wakeup_fd`
    (written by the C-level handler, whatever the main thread is doing): when the step in
    flight (or the next one) has not finished `grace` seconds after it began, the watcher
    prints `expired(step number, grace)`'s line and ends the process at once (`os._exit`,
    status 128 + the signal); a second signal meanwhile ends it at once too. It writes no checkpoint
    then: the stuck step may have applied some of its updates, and its data iterator and
    random streams are in its hands, so the newest checkpoint is the one to resume from.
    The grace period is at least three times the last finished step's time, so a slow
    model's step is not taken for a hang."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    GRACE = 10.0  # seconds
    POLL = 0.1

    def __init__(self, enabled=True, expired=None, grace=None):
        self.received = 0
        self.saved = {}
        self.enabled = enabled
        self.expired = expired or (
            lambda number, grace: f"step {number} did not finish within {grace:g} s"
        )
        self.grace = self.GRACE if grace is None else grace
        self.in_step = None  # when the step in flight began (None: none in flight)
        self.number = 0  # and its number
        self.last_step = 0.0  # how long the last finished step took
        self.pipe = None
        self.wakeup = None
        self.done = threading.Event()

    @property
    def name(self):
        return signal.Signals(self.received).name if self.received else ""

    def step_started(self, number):
        """Step `number` (counted from 1) begins."""
        self.number = number
        self.in_step = time.monotonic()

    def step_finished(self):
        if self.in_step is not None:
            self.last_step = time.monotonic() - self.in_step
        self.in_step = None

    def _handle(self, signum, frame):
        self.received = signum
        self._restore()

    def _restore(self):
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        self.saved = {}

    def _watch(self, fd):
        """The watcher thread: waits for a signal byte on `fd`, then for the step in flight."""
        seen = 0
        while True:
            try:
                data = os.read(fd, 1)
            except OSError:
                data = b""
            if not data:  # the loop is over
                os.close(fd)
                return
            signum = data[0]
            if signum not in self.SIGNALS:
                continue
            if seen:  # a second signal while the main thread could not act on the first
                self._exit(signum, "a second signal; stopped at once")
            seen = signum
            threading.Thread(target=self._deadline, args=(signum,), daemon=True).start()

    def _deadline(self, signum):
        grace = max(self.grace, 3 * self.last_step)
        while not self.done.wait(self.POLL):
            began = self.in_step
            if began is not None and time.monotonic() - began > grace:
                self._exit(signum, self.expired(self.number, grace))

    def _exit(self, signum, message):
        say_and_exit(f"{signal.Signals(signum).name}: {message}", 128 + signum)

    def __enter__(self):
        if self.enabled and threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self.saved[signum] = signal.signal(signum, self._handle)
            self.pipe = os.pipe()
            os.set_blocking(self.pipe[1], False)
            self.wakeup = signal.set_wakeup_fd(self.pipe[1], warn_on_full_buffer=False)
            threading.Thread(
                target=self._watch, args=(self.pipe[0],), daemon=True, name="stop-signals"
            ).start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self._restore()
        if self.pipe is not None:
            signal.set_wakeup_fd(self.wakeup)
            os.close(self.pipe[1])  # the watcher reads end-of-file and returns
            self.pipe = None
        return False


# Folders a process removes even when it ends at once (`say_and_exit`): a non-chief worker's
# temporary run folder, which holds its checkpoints (`runner.worker`).
TEMPORARY = []


def say_and_exit(message, status, fallback="stopped at once"):
    """Write `stagegan: error: {message}` (a string, or a function that returns it) as one
    line on stderr, remove the `TEMPORARY` folders, and end the process at once with
    `status`, from any thread: the main thread may be blocked inside TensorFlow. The line
    goes to `sys.stderr`, not descriptor 2, which the CLI points at /dev/null
    (`cli.main.import_tensorflow`). When `message` fails, `fallback` is written."""
    try:
        try:
            text = message() if callable(message) else message
        except Exception:  # noqa: BLE001 - the process ends anyway: still say why
            text = fallback
        sys.stderr.write(f"stagegan: error: {text}\n")
        sys.stderr.flush()
        for folder in TEMPORARY:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        os._exit(status)


class PeerDeadline:
    """A multi-worker step that waits too long for a peer ends the process: a watcher thread
    writes `message(step number, seconds waited, newest)` (`newest`: the words on the last
    checkpoint, which the loop keeps current, so the watcher reads no file) as one line and
    exits at once with `PeerLost`'s status (4). Nothing is saved then: every checkpoint needs
    the silent peer.

    How long is too long, with `timeout` T (`STAGEGAN_COLLECTIVE_TIMEOUT`): three times the
    median of the last steps' times, at least T and at most `PATIENCE` x T; a `patient` step
    (one after a stage's end or a step where the chief does more than the others:
    histograms, sample dumps or an evaluation, while the others wait in the next step) gets
    the most. A step function's first run in this process (it traces) is not watched.
    TensorFlow's own collective deadline is longer still (`cluster.TF_DEADLINE` x T,
    `placement._multi_worker_strategy`), so stagegan acts first: TensorFlow's abort of a
    receive still pending from the silent peer can crash the process (SIGSEGV, no
    message)."""

    POLL = 0.1
    HISTORY = 16  # the steps whose median time sets an ordinary step's deadline

    def __init__(self, timeout, message, newest=""):
        self.timeout, self.message = timeout, message
        self.newest = newest  # the words on the last checkpoint, which the loop keeps current
        self.watch = None  # (step number, when it began, its deadline in seconds) or None
        self.began = None
        self.times = collections.deque(maxlen=self.HISTORY)
        self.done = threading.Event()

    def step_started(self, number, watched=True, patient=False):
        self.began = time.monotonic()
        most = PATIENCE * self.timeout
        usual = 3 * statistics.median(self.times) if self.times else 0.0
        grace = most if patient else min(max(self.timeout, usual), most)
        self.watch = (number, self.began, grace) if watched else None

    def step_finished(self):
        if self.began is not None:
            self.times.append(time.monotonic() - self.began)
        self.watch = self.began = None

    def _watch(self):
        while not self.done.wait(self.POLL):
            watch = self.watch
            if watch is None:
                continue
            number, began, grace = watch
            waited = time.monotonic() - began
            if waited > grace:
                fallback = f"{PeerLost.key_name}: step {number} waited {waited:.0f} s for a peer"
                say_and_exit(
                    functools.partial(self._line, number, waited), PeerLost.status, fallback
                )

    def _line(self, number, waited):
        return f"{PeerLost.key_name}: {self.message(number, waited, self.newest)}"

    def __enter__(self):
        threading.Thread(target=self._watch, daemon=True, name="peer-deadline").start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        return False


def extra_work(config, done):
    """Whether the chief of a multi-worker run does more than the others after global step
    `done` (`config`: the chief's, whose samples and evaluations the others leave out):
    histograms (its step computes the gradients too, a variant it may trace then), sample
    dumps or an evaluation. Stage ends too, which `Tick.stage_done` says. (Checkpoints every
    process writes alike.)"""
    every = [config.log.histograms if config.log.tensorboard else 0]
    every += [config.samples.every] if config.samples is not None else []
    every += [config.eval.every] if config.eval is not None else []
    return any(e and done % e == 0 for e in every)


def lost_a_server(error):
    """Whether a parameter-server run's error is a lost server (its connection refused or
    closed, a deadline passed), not an error of the step itself (bad data, memory)."""
    lost = (
        tf.errors.UnavailableError,
        tf.errors.AbortedError,
        tf.errors.CancelledError,
        tf.errors.DeadlineExceededError,
    )
    return isinstance(error, lost)


def describe_server_error(error):
    """One line from TensorFlow's error when a parameter-server run lost a server."""
    text = str(getattr(error, "message", error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = (lines or [type(error).__name__])[0]
    task = re.search(r"/job:(ps|worker)/replica:\d+/task:(\d+)", text)
    job = {"ps": "parameter server", "worker": "worker"}
    who = f"{job[task.group(1)]} {task.group(2)}" if task else "a server"
    return f"lost contact with {who}: {first}"


def describe_peer_error(error):
    """One line from TensorFlow's error when a collective operation lost a peer."""
    text = str(getattr(error, "message", error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    aborted = [line for line in lines if line.startswith("Collective ops is aborted by: ")]
    # TensorFlow's wrapper lines say nothing of what failed.
    said = [
        line
        for line in lines
        if line != "Graph execution error:" and not line.startswith(("Detected at node", "File "))
    ]
    first = aborted[0].split(": ", 1)[1] if aborted else (said or [type(error).__name__])[0]
    # The peer: the target of a failed call or, when the coordination service noticed first,
    # the task it lists as no longer sending heartbeats (and names the error's source).
    task = r"/job:\w+/(?:replica:\d+/)?task:\d+"
    peer = (
        re.search(r"remote target (/job:\S+?)(?: while|$)", text, re.M)
        or re.search(rf"stopped sending heartbeats\):\s*({task})", text)
        or re.search(rf"Error reported from ({task})", text)
    )
    who = "a worker"
    if peer:
        who = f"worker {peer.group(1).rsplit('task:', 1)[-1]} ({peer.group(1)})"
    return f"lost contact with {who}: {first}"

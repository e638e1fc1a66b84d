"""`python -m stagegan launch --workers N [train arguments]`: a multi-worker run on one machine.

Starts N `python -m stagegan train` processes on 127.0.0.1, each with a `TF_CONFIG` naming the
same cluster (free ports) and its own task index, and `devices.strategy=multi_worker`. Worker 0
is the chief: it alone writes the run folder; the others' output lines are prefixed
`[worker i]`. It is for trying multi-worker runs, and for the tests; on a real cluster, start
one `train` process per host with its own `TF_CONFIG` (see the README).

`cli.cmd_launch` checks the arguments first (a bad config is one line and exit status 2,
and no worker starts). A new run's folder is picked there (the next `runs/NNNNN-name` unless
`--run-dir` says), so every worker names the same one.

On a GPU host each worker gets GPUs of its own (`--gpus-per-worker N`: worker i sees GPUs
i*N .. i*N+N-1 through `CUDA_VISIBLE_DEVICES`; by default the visible GPUs are shared out
evenly) and `TF_FORCE_GPU_ALLOW_GROWTH=true`, so no worker takes every GPU's memory. Without
GPUs (`nvidia-smi` lists none) the workers' environment is the launcher's, as before.
The GPUs are counted without importing TensorFlow (`host_gpus`).

When a worker fails, the others stop by themselves: TensorFlow's collective operations abort
when a peer is gone (stagegan turns that into one line naming the lost peer). Any worker still
running `grace` seconds later is terminated. The exit status is that of the first worker to
fail (128 + N for a signal), or 0.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from stagegan.config.cluster import host_gpus  # noqa: F401 - launch.host_gpus, as before
from stagegan.errors import ConfigError

MULTI_WORKER = "devices.strategy=multi_worker"


PARAMETER_SERVER = "devices.strategy=parameter_server"


def launch(workers, worker_args, grace=60.0, gpus=None, ps=0):
    """Run `train worker_args` as `workers` local worker processes; returns the exit status.
    The arguments were checked by the caller (`cli.cmd_launch`); `gpus`: each worker's GPU
    ids (`assign_gpus`), or None to leave the environment as it is. With `ps` parameter
    servers, a `parameter_server` cluster: `train` on the chief, `serve` on the others."""
    if ps:
        return ServerCluster(workers, ps, worker_args, grace, gpus).run()
    return Cluster(workers, worker_args, grace, gpus).run()


def assign_gpus(workers, per_worker, available):
    """Each worker's GPU ids: worker i gets `available[i*per_worker : (i+1)*per_worker]`.

    Args:
        workers: the number of worker processes.
        per_worker: `--gpus-per-worker` (an int >= 0), or None: the visible GPUs shared out
            evenly (none when there are none).
        available: the GPU ids this process may use (`host_gpus`).

    Returns:
        A list of `workers` lists of ids, or None (no GPUs: the environment is left alone).

    Raises:
        ConfigError: a negative count, or fewer GPUs than `workers * per_worker`.
    """
    if per_worker is None:
        if not available:
            return None
        if len(available) < workers:
            raise ConfigError(
                "--gpus-per-worker",
                f"{workers} workers but only {_gpus(len(available))} visible; pass "
                "--gpus-per-worker 0 to run the workers on the CPU, or use fewer workers",
            )
        per_worker = len(available) // workers
    if per_worker < 0:
        raise ConfigError("--gpus-per-worker", f"must be 0 or more. Received: {per_worker}")
    if workers * per_worker > len(available):
        raise ConfigError(
            "--gpus-per-worker",
            f"{workers} workers with {_gpus(per_worker)} each need {_gpus(workers * per_worker)}, "
            f"but only {_gpus(len(available))} visible",
        )
    return [available[i * per_worker : (i + 1) * per_worker] for i in range(workers)]


def _gpus(count):
    return f"{count} GPU{'' if count == 1 else 's'}"


def worker_env(environ, addresses, index, gpus=None):
    """The environment of worker `index`: the launcher's, with its `TF_CONFIG` and, when
    `gpus` (from `assign_gpus`) is given, only its own GPUs, with memory growth (so that
    workers sharing a machine do not each reserve every GPU's memory)."""
    env = dict(environ, TF_CONFIG=tf_config(addresses, index))
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[index])
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    return env


def free_ports(count):
    """`count` distinct free TCP ports on 127.0.0.1 (held open together while picked)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(addresses, index):
    """The `TF_CONFIG` of worker `index` of a multi-worker cluster of `addresses`."""
    return ps_tf_config({"worker": addresses}, "worker", index)


class Launched:
    """What both launches share: `run` starts the processes (`_start_all`) and waits
    (`_wait`: the exit status) with SIGINT and SIGTERM forwarded (`_forward`); at the end
    every process still running is stopped and the output threads are joined."""

    def run(self):
        previous = {s: signal.signal(s, self._forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._start_all()
            return self._wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            stop_processes(self._started())
            for thread in self.threads:
                thread.join(timeout=5)


class Cluster(Launched):
    """The worker processes of one launch."""

    def __init__(self, workers, args, grace, gpus=None):
        self.args = args
        self.grace = grace
        self.count = workers
        self.gpus = gpus
        self.processes = []
        self.threads = []

    def _start_all(self):
        addresses = [f"127.0.0.1:{port}" for port in free_ports(self.count)]
        for index in range(self.count):
            self.processes.append(self._start(addresses, index))

    def _started(self):
        return self.processes

    def _start(self, addresses, index):
        env = worker_env(os.environ, addresses, index, self.gpus)
        command = [sys.executable, "-m", "stagegan", "train", *self.args]
        piped = subprocess.PIPE if index else None  # the chief's output passes straight through
        process = subprocess.Popen(
            command,
            env=env,
            stdout=piped,
            stderr=subprocess.STDOUT if index else None,
            text=True,
            start_new_session=True,  # signals reach workers through the launcher only
        )
        if index:
            label = f"worker {index}"
            thread = threading.Thread(target=_prefix, args=(process.stdout, label), daemon=True)
            thread.start()
            self.threads.append(thread)
        return process

    def _wait(self):
        failed, deadline = None, None
        while True:
            codes = [p.poll() for p in self.processes]
            if failed is None:
                for index, code in enumerate(codes):
                    if code not in (None, 0):
                        failed = (index, code)
                        deadline = time.monotonic() + self.grace
                        running = [i for i, c in enumerate(codes) if c is None]
                        _say(
                            f"worker {index} {describe(code)}"
                            + (
                                f"; waiting up to {self.grace:g} s for workers "
                                f"{', '.join(map(str, running))} to stop"
                                if running
                                else ""
                            )
                        )
                        break
            if all(code is not None for code in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                running = [i for i, c in enumerate(codes) if c is None]
                _say(f"workers {', '.join(map(str, running))} still running; terminating them")
                stop_processes(self.processes)
                break
            time.sleep(0.1)
        if failed is None:
            return 0
        code = failed[1]
        return 128 - code if code < 0 else code

    def _forward(self, signum, frame):
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signum)


def ps_tf_config(addresses, task_type, index):
    """The `TF_CONFIG` of one task of a parameter-server cluster (`addresses`: `{job: [...]}`)."""
    return json.dumps({"cluster": addresses, "task": {"type": task_type, "index": index}})


class ServerCluster(Launched):
    """The processes of a local `parameter_server` launch: the chief runs `train` (its
    output passes straight through), each worker and parameter server runs `serve` (its
    lines prefixed `[worker i]`, `[ps i]`), all on 127.0.0.1.

    The run ends with the chief: its exit status is the launch's, and the servers are
    stopped then. A worker that dies is started again on its address (up to `RESTARTS`
    times): meanwhile TensorFlow's coordinator runs its step again on another worker, or
    waits for it. A parameter server that dies takes its variables with it: the chief stops
    with one line and exit status 4, and the run resumes from its last checkpoint.
    """

    RESTARTS = 3

    def __init__(self, workers, ps, args, grace, gpus=None):
        self.args, self.grace, self.gpus = args, grace, gpus
        self.counts = {"worker": workers, "ps": ps}
        self.processes = {}  # (job, index) -> Popen
        self.restarts = {}  # worker index -> times started again
        self.threads = []

    def _start_all(self):
        ports = iter(free_ports(1 + sum(self.counts.values())))
        jobs = {"chief": 1, **self.counts}
        self.addresses = {
            job: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for job, n in jobs.items()
        }
        for job, count in self.counts.items():
            for index in range(count):
                self._start(job, index)
        self._start("chief", 0)

    def _started(self):
        return self.processes.values()

    def _start(self, job, index):
        env = dict(os.environ, TF_CONFIG=ps_tf_config(self.addresses, job, index))
        if self.gpus is not None:  # the workers compute; the chief and servers hold no GPU
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus[index]) if job == "worker" else ""
            env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
        if job == "chief":
            command = [sys.executable, "-m", "stagegan", "train", *self.args]
        else:  # a server outlives nothing: not even a launcher that is killed
            wait = f"{max(self.grace, 10.0):g}"
            command = [sys.executable, "-m", "stagegan", "serve", "--stop-when-chief-gone", wait]
        chief = job == "chief"
        process = subprocess.Popen(
            command,
            env=env,
            stdout=None if chief else subprocess.PIPE,
            stderr=None if chief else subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        if not chief:
            label = f"{job} {index}"
            thread = threading.Thread(target=_prefix, args=(process.stdout, label), daemon=True)
            thread.start()
            self.threads.append(thread)
        self.processes[(job, index)] = process

    def _wait(self):
        chief, deadline = self.processes[("chief", 0)], None
        while True:
            code = chief.poll()
            if code is not None:
                return 128 - code if code < 0 else code
            if deadline is not None and time.monotonic() > deadline:
                _say(f"the chief is still running {self.grace:g} s later; stopping it")
                chief.terminate()  # a checkpoint, if its steps can still finish
                deadline = time.monotonic() + self.grace
            for (job, index), process in list(self.processes.items()):
                died = process.poll()
                if job == "chief" or died is None:
                    continue
                if job == "worker" and self.restarts.get(index, 0) < self.RESTARTS:
                    self.restarts[index] = self.restarts.get(index, 0) + 1
                    _say(f"worker {index} {describe(died)}; starting it again")
                    self._start(job, index)
                elif not getattr(process, "reported", False):
                    process.reported = True
                    workers = [p for (j, _), p in self.processes.items() if j == "worker"]
                    fatal = job == "ps" or all(p.poll() is not None for p in workers)
                    what = "parameter server" if job == "ps" else "worker"
                    _say(
                        f"{what} {index} {describe(died)}"
                        + (
                            f"; the chief stops when it needs it (or is stopped {self.grace:g} s "
                            "from now)"
                            if fatal
                            else "; the other workers take its steps"
                        )
                    )
                    if fatal and deadline is None:
                        deadline = time.monotonic() + self.grace
            time.sleep(0.1)

    def _forward(self, signum, frame):
        chief = self.processes.get(("chief", 0))
        if chief is not None and chief.poll() is None:
            chief.send_signal(signum)  # the chief checkpoints and stops; then the servers


def stop_processes(processes):
    """SIGTERM every process still running, then SIGKILL any still there 10 s later."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def describe(code):
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _say(text):
    print(f"stagegan: launch: {text}", file=sys.stderr, flush=True)


def _prefix(stream, label):
    for line in stream:
        sys.stdout.write(f"[{label}] {line}")
        sys.stdout.flush()

"""`python -m stagegan serve`: a worker or parameter server of a `parameter_server` cluster.

Under `devices.strategy: parameter_server` the chief (`train`) is TensorFlow's
`ClusterCoordinator`: it holds no weights and computes no step. The variables, optimizer state
and the run's counters live on the parameter servers (`ps` tasks), and every step runs on one
of the workers (`worker` tasks). Both are plain TensorFlow servers, which is all this command
starts: it reads its place in the cluster from `TF_CONFIG`, serves, and never reads a config
or writes a run folder (so a server host needs neither).

A server has nothing to stop it in TensorFlow (the chief may go and come back: a resumed run
reconnects to the same servers). With `--stop-when-chief-gone S` it exits 0 once the chief,
after it was first reached, has not answered for S seconds; `launch` stops its servers itself.
"""

import logging
import os
import time

import tensorflow as tf

from stagegan.config.cluster import answers
from stagegan.errors import ConfigError

log = logging.getLogger("stagegan")


def serve(cluster, task_type, index, stop_after_chief=None, poll=1.0):
    """Serve as `task_type` `index` of `cluster` (`{job: [address]}`) until stopped; returns
    the exit status (0). `stop_after_chief`: seconds without the chief (after it was first
    reached) that end the server; None serves until the process is stopped."""
    config = tf.compat.v1.ConfigProto()
    # A worker runs the steps of the chief's several threads at once; TensorFlow's
    # tutorial gives in-process servers at least this many inter-op threads (with the
    # default of one per core, two cores deadlock).
    config.inter_op_parallelism_threads = max(8, os.cpu_count() or 1)
    try:
        server = tf.distribute.Server(
            tf.train.ClusterSpec(cluster),
            job_name=task_type,
            task_index=index,
            protocol="grpc",
            config=config,
            start=True,
        )
    except tf.errors.OpError as error:  # the port is taken, the host is not this one
        raise ConfigError(
            "TF_CONFIG",
            f"cannot serve {task_type} {index} at {cluster[task_type][index]}: "
            f"{str(error).strip().splitlines()[0]}",
        ) from None
    name = "parameter server" if task_type == "ps" else "worker"
    log.info("%s %d serving at %s", name, index, cluster[task_type][index])
    if stop_after_chief is None:
        server.join()
        return 0
    chief = cluster["chief"][0]
    seen = last = None
    while True:
        now = time.monotonic()
        if answers(chief):
            seen = last = now
        elif seen is not None and now - last > stop_after_chief:
            log.info("%s %d: the chief has gone (%s); stopping", name, index, chief)
            return 0
        time.sleep(poll)

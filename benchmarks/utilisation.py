"""How close a training step comes to the machine: each stage's achieved FLOP/s as a share of
the peak of a large float32 matrix product timed in the same process.

    python benchmarks/utilisation.py [--rounds 5] [--steps 10]

Stages measured, with and without XLA (`devices.jit`), one device (/GPU:0 where there is one,
else /CPU:0, variables there too):
  * dcgan joint: the DCGAN pair at 32x32, width 64, batch 64 (as `overhead.py`), D and G in
    one step;
  * completion joint: `completion_quick`'s joint stage (32x32 shapes, width 16, batch 32),
    D and the completion network in one step;
  * completion reconstruction: its first stage (the completion network on masked L2).

A step's FLOPs are TensorFlow's own count of its graph (`tf.compat.v1.profiler`, the float
operations of every op with a registered cost: convolutions and their gradients, matrix
products, element-wise ops), counted without XLA (with it, the same graph is one compiled
call that the count does not see into). The peak: the median time of a
4096 x 4096 x 4096 float32 matmul (2 n^3 FLOPs), the best case for the same cores.
"""

import argparse
import statistics
import time

from common import dcgan_config, setup_devices


def peak_flops(tf, device, n=4096, rounds=5):
    with tf.device(device):
        a = tf.random.normal([n, n])
        b = tf.random.normal([n, n])
        product = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
        float(product())  # warm up
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            float(product())
            times.append(time.perf_counter() - began)
    return 2 * n**3 / statistics.median(times)


def graph_flops(tf, step):
    from tensorflow.python.profiler import model_analyzer, option_builder

    concrete = step.function.get_concrete_function(tf.TensorSpec([], tf.int64))
    options = option_builder.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    return model_analyzer.profile(concrete.graph, options=options).total_float_ops


def time_steps(trainer, index, steps, rounds):
    schedule = trainer.schedule
    start = schedule.starts[index]
    position = lambda k: schedule.position(start + k % schedule.lengths[index])
    for k in range(2):  # trace and compile
        float(next(iter(trainer.step(position(k)).metrics.values())))
    times = []
    for r in range(rounds):
        began = time.perf_counter()
        for k in range(steps):
            output = trainer.step(position(2 + r * steps + k))
        float(next(iter(output.metrics.values())))
        times.append((time.perf_counter() - began) / steps)
    return statistics.median(times)


def configs(device, jit):
    from stagegan.config.schema import load_config, parse_config

    devices = {"towers": [device], "variables": device, "jit": jit}
    yield "dcgan joint", parse_config(dcgan_config(devices, 64, 64, kinds=["joint"])), 0
    sets = [f"devices={devices}".replace("'", ""), "samples.every=0", "eval=null"]
    completion = load_config("completion_quick", sets)
    yield "completion reconstruction", completion, 0
    yield "completion joint", completion, 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    kind, _ = setup_devices(1)
    import tensorflow as tf

    from stagegan.training.trainer import Trainer

    device = "/GPU:0" if kind == "GPU" else "/CPU:0"
    peak = peak_flops(tf, device)
    print(f"peak: float32 matmul 4096^3 on {device}: {peak / 1e9:.1f} GFLOP/s")
    print(f"{'stage':<28} {'XLA':>5} {'GFLOP/step':>11} {'ms/step':>9} {'GFLOP/s':>9} {'share':>7}")
    counted = {}  # XLA compiles the same graph: its ops sit in one compiled call, uncounted
    for jit in (False, True):
        trainers = {}
        for name, config, index in configs(device, jit):
            if id(config) not in trainers:
                trainers[id(config)] = Trainer(config)
            trainer = trainers[id(config)]
            if name not in counted:
                counted[name] = graph_flops(tf, trainer.stage_steps[index])
            flops = counted[name]
            seconds = time_steps(trainer, index, args.steps, args.rounds)
            rate = flops / seconds
            print(
                f"{name:<28} {'on' if jit else 'off':>5} {flops / 1e9:>11.2f} "
                f"{1000 * seconds:>9.1f} {rate / 1e9:>9.1f} {100 * rate / peak:>6.1f}%",
                flush=True,
            )
    print(f"peak again: {peak_flops(tf, device) / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()

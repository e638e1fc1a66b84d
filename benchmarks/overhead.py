"""stagegan's step against a hand-written `tf.function` GAN step: the same DCGAN pair at 32x32,
the same batch, one device.

    python benchmarks/overhead.py [--steps 20] [--rounds 5] [--batch 64] [--width 32]

For each kind of stage (generator only, discriminator only, alternating D then G, joint), it
times `--rounds` rounds of `--steps` steps of: the plain step (written out below: draw a batch,
forward, tape, Adam), stagegan's step with the NaN guard (the default), and stagegan's step
with `guard.policy: off`, interleaved in one process. It prints the median ms/step of each and
the ratio stagegan / plain (target: at most 1.05). On a GPU machine everything runs on /GPU:0
(variables too, as the plain step keeps them); otherwise on /CPU:0.
"""

import argparse

from common import KINDS, dcgan_config, interleaved_medians


class PlainGan:
    """The hand-written reference: its own copies of the networks and optimizers."""

    def __init__(self, task, device):
        import keras
        import tensorflow as tf

        from stagegan.tasks import unconditional

        self.task, self.tf = task, tf
        with tf.device(device):
            with keras.name_scope("generator"):
                self.g = unconditional.generator(task)
            with keras.name_scope("discriminator"):
                self.d = unconditional.discriminator(task)
            self.images = task.source.images
            self.rng = tf.random.Generator.from_seed(1)
            self.g_opt = keras.optimizers.Adam(2.0e-4, beta_1=0.5)
            self.d_opt = keras.optimizers.Adam(2.0e-4, beta_1=0.5)
            self.g_opt.build(self.g.trainable_variables)
            self.d_opt.build(self.d.trainable_variables)
        self.device = device
        self.steps = {kind: tf.function(getattr(self, kind)) for kind in KINDS}

    def batch(self, size):
        tf = self.tf
        index = self.rng.uniform([size], 0, self.images.shape[0], dtype=tf.int32)
        x = tf.cast(tf.gather(self.images, index), tf.float32) / 127.5 - 1.0
        return x, self.rng.normal([size, self.task.model["latent_dim"]])

    def d_step(self, size):
        tf = self.tf
        x, z = self.batch(size)
        with tf.GradientTape() as tape:
            fake = tf.stop_gradient(self.g(z, training=True))
            loss = tf.reduce_mean(tf.nn.softplus(-self.d(x, training=True))) + tf.reduce_mean(
                tf.nn.softplus(self.d(fake, training=True))
            )
        variables = self.d.trainable_variables
        self.d_opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    def g_step(self, size):
        tf = self.tf
        _, z = self.batch(size)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.softplus(-self.d(self.g(z, training=True), training=True)))
        variables = self.g.trainable_variables
        self.g_opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    def g_only(self, size):
        return {"g": self.g_step(size)}

    def d_only(self, size):
        return {"d": self.d_step(size)}

    def alternating(self, size):
        return {"d": self.d_step(size), "g": self.g_step(size)}

    def joint(self, size):
        tf = self.tf
        x, z = self.batch(size)
        with tf.GradientTape(persistent=True) as tape:
            fake = self.g(z, training=True)
            d_loss = tf.reduce_mean(tf.nn.softplus(-self.d(x, training=True))) + tf.reduce_mean(
                tf.nn.softplus(self.d(tf.stop_gradient(fake), training=True))
            )
            g_loss = tf.reduce_mean(tf.nn.softplus(-self.d(fake, training=True)))
        d_vars, g_vars = self.d.trainable_variables, self.g.trainable_variables
        d_grads, g_grads = tape.gradient(d_loss, d_vars), tape.gradient(g_loss, g_vars)
        self.d_opt.apply_gradients(zip(d_grads, d_vars, strict=True))
        self.g_opt.apply_gradients(zip(g_grads, g_vars, strict=True))
        return {"d": d_loss, "g": g_loss}

    def step(self, kind, size):
        with self.tf.device(self.device):
            return self.steps[kind](size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64, help="DCGAN width (channels)")
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    args = parser.parse_args()

    import tensorflow as tf

    from stagegan.config.schema import parse_config
    from stagegan.core.schedule import Position
    from stagegan.training.trainer import Trainer

    device = "/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"
    devices = {"towers": [device], "variables": device}
    trainers = {
        policy: Trainer(parse_config(dcgan_config(devices, args.batch, args.width, policy=policy)))
        for policy in ("skip", "off")
    }
    plain = PlainGan(trainers["off"].task, device)

    print(f"device {device}, DCGAN 32x32 width {args.width}, batch {args.batch}, "
          f"median of {args.rounds} x {args.steps} steps")  # fmt: skip
    print(f"{'stage':<12} {'plain ms':>9} {'stagegan ms':>12} {'ratio':>6} "
          f"{'guard off ms':>13} {'ratio':>6}")  # fmt: skip
    ratios = []
    for index, kind in enumerate(KINDS):
        if kind not in args.kinds:
            continue
        position = Position(index, index, 0)
        runs = {
            "plain": lambda kind=kind: plain.step(kind, args.batch),
            "skip": lambda p=position: trainers["skip"].step(p),
            "off": lambda p=position: trainers["off"].step(p),
        }
        median = interleaved_medians(runs, args.steps, args.rounds)
        ratio, ratio_off = median["skip"] / median["plain"], median["off"] / median["plain"]
        ratios.append(ratio)
        print(f"{kind:<12} {median['plain'] * 1e3:9.2f} {median['skip'] * 1e3:12.2f} "
              f"{ratio:6.3f} {median['off'] * 1e3:13.2f} {ratio_off:6.3f}")  # fmt: skip
    print(f"ratio stagegan/plain (guard on), worst stage: {max(ratios):.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()

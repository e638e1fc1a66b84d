"""The engine: the schedule and `until`, variable selection, replicas (towers and tf.distribute)
and their gradient averaging, the compiled stage steps, the NaN guard, precision, optimizers,
the EMA, placement, staging, layers, losses, augmentation and regularisers."""

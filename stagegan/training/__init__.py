"""Training: the `Trainer` (built from the config) and the loop with its callbacks."""

"""Evaluation: the maths (modes, hole metrics, FID/KID, precision/recall, c2st), feature
extractors, and `Evaluation`, which runs a task's metrics on a trainer."""

"""Evaluation: every metric declared once (`registry.py`: its direction, and metrics users
add), the maths (modes, hole metrics, FID/KID, precision/recall, c2st), feature extractors,
and `Evaluation`, which runs a task's metrics on a trainer."""

"""One rule for "is this evaluation better?", shared by `checkpoint.keep_best` (the training
loop's keeper of the `best` checkpoint) and `until: {eval: ...}` plateaus (`core.until`), as
Keras's `MonitorCallback` serves EarlyStopping and ModelCheckpoint alike.

    value = reading(values, "fid")         # a float, or None: this evaluation gave none
    if value is not None and improves(value, best, "min"):
        best = value
"""


def reading(values, metric):
    """The value of `metric` in an evaluation's `values` as a float, or None when it gave no
    number (missing, None, a bool, text): that evaluation neither improves nor counts."""
    value = values.get(metric)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return float(value)


def improves(value, best, mode, min_delta=0.0):
    """Whether `value` beats `best` (None: there is none yet) by more than `min_delta`, in
    `mode`'s direction ("min": lower is better, "max": higher is better). Ties do not."""
    if mode not in ("min", "max"):  # "auto" is resolved when the run is built
        raise ValueError(f"mode must be 'min' or 'max', not {mode!r}")
    if best is None:
        return True
    return (best - value if mode == "min" else value - best) > min_delta

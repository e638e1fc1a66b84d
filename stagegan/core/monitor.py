"""One rule for "is this evaluation better?", shared by `checkpoint.keep_best` (the training
loop's keeper of the `best` checkpoint) and `until: {eval: ...}` plateaus (`core.until`), as
Keras's `MonitorCallback` serves EarlyStopping and ModelCheckpoint alike. Which way a metric
is better is not known here: it is given (`mode`, resolved from the metric's declaration by
`stagegan.evaluation.registry` when the run is built).

    monitor = Monitor("fid", "min", who="checkpoint.keep_best")
    value = monitor.read(values, step)     # a float, or None: this evaluation gave none
    if value is not None and monitor.improves(value, best):
        best = value
"""

import logging
import math

log = logging.getLogger("stagegan")


def reading(values, metric):
    """The value of `metric` in an evaluation's `values` as a float, or None when it gave no
    number (missing, None, NaN, a bool, text): that evaluation neither improves nor counts."""
    value = values.get(metric)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
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


class Monitor:
    """One evaluation metric watched for improvement.

    Args:
        metric: its name in the evaluation's values.
        mode: "min" or "max".
        min_delta: how much better a value must be to improve.
        who: the config key that watches (for its warning).
    """

    def __init__(self, metric, mode, min_delta=0.0, who="eval"):
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', not {mode!r}")
        self.metric, self.mode, self.min_delta, self.who = metric, mode, min_delta, who

    def read(self, values, step):
        """The metric's value in `values` (the evaluation of global step `step`), or None,
        with one warning, when that evaluation gave it no number: it neither improves nor
        counts."""
        value = reading(values, self.metric)
        if value is None:
            log.warning(
                "%s: the evaluation at step %d has no value for %s; it neither improves nor counts",
                self.who,
                step,
                self.metric,
            )
        return value

    def improves(self, value, best):
        return improves(value, best, self.mode, self.min_delta)

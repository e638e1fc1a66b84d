"""Test speed, not behaviour: graph ops created without recording the Python stack that
created them.

TensorFlow keeps each op's creating stack only for the "defined at" lines of its runtime error
messages. Walking the stack for each of a step's thousands of ops, under pytest's deep stacks,
was 4.5% of the suite's CPU time (a heavy preset's check 15% faster without it). The pytest
workers (`conftest.py`) and the forked `python -m stagegan` processes (`zygote_warm.py`) skip
it; the fresh subprocesses (`test_cli`'s, the exports loaded without stagegan, the multi-worker
launch) keep TensorFlow as it is.
"""

from tensorflow.python.framework import ops


def skip_op_stacks():
    """Make `extract_traceback=False` the default of TensorFlow's op creation; a TensorFlow
    whose op creation takes other arguments is left as it is."""
    create = getattr(ops._create_c_op, "__wrapped__", ops._create_c_op)
    names, defaults = create.__code__.co_varnames, create.__defaults__
    if names[5:6] == ("extract_traceback",) and defaults and defaults[-1] is True:
        create.__defaults__ = (*defaults[:-1], False)

"""Test speed, not behaviour: graph ops created without recording the Python stack that
created them.

TensorFlow reads an op's creating stack (`Operation.traceback`) only in error messages (the
"defined at" lines of its runtime errors) and debugging tools, none of which the suite uses.
Walking the stack for each of a step's thousands of ops, under pytest's deep stacks, was 4.5%
of the suite's CPU time (a heavy preset's check 15% faster without it). The pytest workers
(`conftest.py`) and the forked `python -m stagegan` processes (`zygote_warm.py`) skip it; the
fresh subprocesses (`test_cli`'s, the exports loaded without stagegan, the multi-worker
launch) keep TensorFlow as it is.
"""

import inspect


def skip_op_stacks():
    """Make `extract_traceback=False` the default of TensorFlow's op creation. Returns whether
    it did: a TensorFlow whose op creation has no such parameter, or is not a plain function,
    is left as it is (the suite is slower, nothing else)."""
    try:
        from tensorflow.python.framework import ops

        create = inspect.unwrap(ops._create_c_op)
        names = create.__code__.co_varnames[: create.__code__.co_argcount]
        defaults = list(create.__defaults__ or ())
        index = names.index("extract_traceback") - (len(names) - len(defaults))
        if index < 0 or defaults[index] is not True:
            return False
        defaults[index] = False
        create.__defaults__ = tuple(defaults)
        return True
    except (ImportError, AttributeError, TypeError, ValueError):
        return False

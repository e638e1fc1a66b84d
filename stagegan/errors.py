"""The exceptions of stagegan. Each is a `StageganError` with the key (a config key path,
file or flag) it is about; the CLI turns it into one line on stderr and an exit status, and the
Python API (`stagegan.Error`) raises it as it is.

* `ConfigError`: bad user input: status 2.
* `WriteError`: a file of the run could not be written (a full disk, permissions): status 2.
* `RunStopped`: a run that stopped before its end on purpose (the NaN guard, a signal): its
  own status (3 for the guard, 4 for a lost multi-worker peer, 128 + the signal number for
  SIGINT and SIGTERM).
"""


class StageganError(Exception):
    """Any error stagegan reports: `key` (the config key path, file or flag it is about, or
    "" when none), `message` (what is wrong), `status` (the CLI's exit status)."""

    status = 2

    def __init__(self, key, message):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


class ConfigError(StageganError):
    """Bad user input: a config key, a file, a pattern, a checkpoint.

    The CLI prints it as one line, `stagegan: error: KEY: MESSAGE`, and exits with status 2.

    Args:
        key: the config key path (e.g. `stages[1].updates[0].train`) or file the problem is in.
        message: what is wrong, with the value received where that helps.
    """


class WriteError(StageganError):
    """A file of the run could not be written: a full disk, permissions, a read-only folder.

    The CLI prints it as one line, `stagegan: error: PATH: MESSAGE`, and exits with status 2.

    Args:
        key: the file or folder (or `checkpoint`) that could not be written.
        message: what failed, and how the run can go on.
    """


class RunStopped(StageganError):
    """A run stopped before its end. `status`: the CLI's exit status; `message`: one line;
    `key`: what stopped it (`guard`, `multi_worker`, `signal`)."""

    status = 1
    key_name = "signal"

    def __init__(self, message, status=None):
        super().__init__(self.key_name, message)
        if status is not None:
            self.status = status


class GuardStop(RunStopped):
    """The NaN/Inf guard stopped the run (`guard.policy: stop`, or too many skips in a row,
    or non-finite weights where a checkpoint was due). Exit status 3."""

    status = 3
    key_name = "guard"


class Interrupted(RunStopped):
    """SIGINT or SIGTERM: the run wrote a checkpoint after the current step and stopped.
    Exit status 128 + the signal number (130, 143), as a shell reports a killed process."""


class PeerLost(RunStopped):
    """A multi-worker run lost a peer worker (it died, or stopped answering): TensorFlow's
    collective operations aborted. Exit status 4; the run resumes from its last checkpoint."""

    status = 4
    key_name = "multi_worker"


class ServerLost(PeerLost):
    """A parameter-server run lost a parameter server (its variables are gone with it), or
    a worker's step failed for good. Exit status 4; the run resumes from its last
    checkpoint, with the servers started again."""

    key_name = "parameter_server"


def first_line(error):
    """An exception's message cut to its first line (its type's name when it has none): what
    a one-line error quotes of what TensorFlow, Keras or a user's code raised."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def out_of_memory(error):
    """A `ConfigError` for running out of memory (Python's `MemoryError`, TensorFlow's
    `ResourceExhaustedError`), which the size checks should have refused before; None for
    any other error."""
    if isinstance(error, MemoryError) or type(error).__name__ == "ResourceExhaustedError":
        return ConfigError(
            "memory",
            f"ran out of memory ({type(error).__name__}: {first_line(error)[:200]}); use "
            "smaller sizes, counts or batches",
        )
    return None


def shown(value):
    """`repr(value)`, but an int beyond any float as words (Python refuses to print one of
    more than 4,300 digits, and a message should not be a thousand digits long)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1e308:
        return "an integer beyond 1e308"
    return repr(value)

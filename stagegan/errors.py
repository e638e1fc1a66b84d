"""The one exception type for a user's bad input."""


class ConfigError(Exception):
    """Bad user input: a config key, a file, a pattern, a checkpoint.

    The CLI prints it as one line, `stagegan: error: KEY: MESSAGE`, and exits with status 2.

    Args:
        key: the config key path (e.g. `stages[1].updates[0].train`) or file the problem is in.
        message: what is wrong, with the value received where that helps.
    """

    def __init__(self, key, message):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)

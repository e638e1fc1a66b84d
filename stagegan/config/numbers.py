"""Numbers from users. Every number read from a flag, a config value, an environment variable
or an API argument goes through `as_number` or `as_integer` (a flag's or a variable's text
through `parse_number`), so that what no float can hold (an integer of 400 digits, `1e400`,
`nan`, `inf`) is refused in one line naming where it came from, never met later as an
`OverflowError` or a deadline that never comes.

Imports nothing heavy: the CLI checks its flags before it imports TensorFlow.
"""

import math
import re

from stagegan.errors import ConfigError, shown

# The largest integer a config takes: steps, counts and intervals meet TensorFlow's int64
# step counter, and none means anything beyond it.
MAX_INTEGER = 2**62


def as_number(value, key, minimum=None, maximum=None, positive=False, what="a number"):
    """`value` (an int or a float, not a bool) as a finite float within the bounds.

    Args:
        value: the number given.
        key: the flag, config key, variable or argument it came through (named in errors).
        minimum, maximum: inclusive bounds, or None.
        positive: refuse 0 and below.
        what: how a message names what is expected ("a number of seconds").

    Raises:
        ConfigError: on `key`: not a number, beyond any float, NaN or infinite, out of bounds.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be {what}. Received: {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        raise ConfigError(key, f"must be a finite number. Received: {shown(value)}") from None
    if not math.isfinite(number):
        raise ConfigError(key, f"must be a finite number. Received: {value}")
    if positive and number <= 0:
        raise ConfigError(key, f"must be positive. Received: {value}")
    if minimum is not None and number < minimum:
        raise ConfigError(key, f"must be at least {minimum:g}. Received: {value:g}")
    if maximum is not None and number > maximum:
        raise ConfigError(key, f"must be at most {maximum:g}. Received: {value:g}")
    return number


def as_integer(value, key, minimum=None, maximum=MAX_INTEGER):
    """`value` as an int (not a bool, not a float) within the bounds (`maximum`: 2**62 unless
    told; None: none).

    Raises:
        ConfigError: on `key`: not an integer, or out of bounds.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer. Received: {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"must be at least {minimum}. Received: {shown(value)}")
    if maximum is not None and value > maximum:
        bound = "2**62" if maximum == MAX_INTEGER else f"{maximum}"
        raise ConfigError(key, f"must be at most {bound}. Received: {shown(value)}")
    return value


NUMBER_TEXT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
INTEGER_TEXT = re.compile(r"[+-]?\d+")


def brief(text, most=40):
    """`text` quoted for a message, cut to its first `most` characters when longer."""
    text = str(text)
    if len(text) <= most:
        return repr(text)
    return f"{text[:most]!r}... ({len(text):,} characters)"


def parse_number(text, key, integer=False, **bounds):
    """The number written in `text` (a flag's or an environment variable's), through
    `as_integer` (`integer`) or `as_number` with `bounds`. Only plain decimal numbers are
    numbers here: `nan`, `inf` and `0x10` are refused as text, and a number too large for a
    float by its value.

    Raises:
        ConfigError: on `key`.
    """
    text = str(text).strip()
    pattern = INTEGER_TEXT if integer else NUMBER_TEXT
    if not pattern.fullmatch(text) or len(text) > 4300:  # int() refuses more digits
        kind = "an integer" if integer else bounds.get("what", "a number")
        raise ConfigError(key, f"must be {kind}. Received: {brief(text)}")
    if integer:
        bounds.pop("what", None)
        return as_integer(int(text), key, **bounds)
    value = int(text) if INTEGER_TEXT.fullmatch(text) else float(text)
    if isinstance(value, float) and math.isinf(value):  # 1e400: beyond any float
        raise ConfigError(key, f"must be a finite number. Received: {brief(text)}")
    return as_number(value, key, **bounds)

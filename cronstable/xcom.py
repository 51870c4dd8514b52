"""Values passed between the tasks of a workflow run ("xcom"): their rules, in one place.

A leaf (the standard library only, no asyncio): the loader checks ``xcomEnv`` with
it, the runtime and the runs' channels hold values to it, and the job-side client
``cronstable xcom`` checks what it sends before it connects.

* A value belongs to one workflow run and one task of it, under a *key*: 1-128
  letters, digits and ``_ . -``, not starting with ``.`` or ``-`` (so a key is also a
  file name in ``$CRONSTABLE_XCOM_DIR``).
* A value is UTF-8 text without NUL (it may become an environment variable), at most
  :data:`MAX_VALUE` bytes; a workflow run's values, keys included, at most
  :data:`MAX_RUN` bytes together.
* A task that declares ``xcomEnv: [TASK.KEY]`` gets the value as the environment
  variable :func:`env_name` gives: ``CRONSTABLE_XCOM_<TASK>_<KEY>``, upper case, every
  character other than a letter or digit written ``_``.
"""

from __future__ import annotations

import re

KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
"""What a key may be."""
MAX_VALUE = 64 * 1024
"""Bytes (UTF-8) of one value."""
MAX_RUN = 1024 * 1024
"""Bytes of a workflow run's values together, their keys included."""
DIR_ENV = "CRONSTABLE_XCOM_DIR"
"""The variable naming the directory a task's run may write values into, one file a key."""
ENV_PREFIX = "CRONSTABLE_XCOM_"

_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def env_name(task: str, key: str) -> str:
    """The environment variable of ``task``'s value ``key`` in a task declaring it."""
    return ENV_PREFIX + _NOT_ALNUM.sub("_", task).upper() + "_" + _NOT_ALNUM.sub("_", key).upper()


def size(key: str, value: str) -> int:
    """What a value counts against :data:`MAX_RUN`."""
    return len(key.encode()) + len(value.encode())


def key_problem(key: object) -> str | None:
    """Why ``key`` is not a key; None when it is one."""
    if not isinstance(key, str) or KEY.fullmatch(key) is None:
        return (
            f"{key!r} is not an xcom key: 1-128 letters, digits and _ . -, not starting with . or -"
        )
    return None


def value_problem(value: object) -> str | None:
    """Why ``value`` cannot be a value; None when it can."""
    if not isinstance(value, str):
        return "a value is text"
    if "\x00" in value:
        return "a value cannot hold a NUL character"
    try:
        length = len(value.encode())
    except UnicodeEncodeError:
        return "a value is UTF-8 text (this one holds a lone surrogate)"
    if length > MAX_VALUE:
        return f"a value is at most {MAX_VALUE} bytes, this one {length}"
    return None

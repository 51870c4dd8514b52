"""The exit codes the commands share.

A leaf: every subcommand's module imports its codes from here, not from the argument
parser in ``cli/__init__.py``, which imports the subcommands (lazily) in turn.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2

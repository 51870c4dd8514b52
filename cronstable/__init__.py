"""cronstable: a GitOps cron daemon.

Importing the package is cheap on purpose: the CLI's fast paths (``--version``,
``validate``, ``schema``, ``next``) must not pay for asyncio or aiohttp.
"""

__version__ = "0.1.0"

"""Every run's channel to its daemon, and what the job-side clients ask over it.

When the daemon starts a run it makes a unix socket for that run alone, in a
directory of its own (``0700``, the socket ``0600``, both the job's user's) in the
daemon's runtime directory, and a token, and passes both in the job's environment
(``CRONSTABLE_RUN_SOCKET``, ``CRONSTABLE_RUN_TOKEN``).  The token is good on that
socket only and only while the run lives: the run's end revokes it, closes its
connections and removes the socket.  The job-side commands (``cronstable state
get``, ``cronstable lock``) are thin clients of it.

* :mod:`.protocol`: the wire form, shared by both ends (no asyncio);
* :mod:`.client`: the blocking client the commands use (no asyncio);
* :mod:`.server`: the daemon's end, on its event loop (:class:`~.server.RunChannels`);
* :mod:`.locks`: the named locks of ``cronstable lock``, on the node or, with a
  cluster, in the cluster's store.

This package's ``__init__`` imports nothing, so a client loads only what it uses.
"""

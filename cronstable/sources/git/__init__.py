"""A git remote as a configuration source, fetched with dulwich into a bare cache repository.

One job per module:

* :mod:`~cronstable.sources.git.spec` — the spec string (``git+https://…?ref=&path=``):
  parsing, checking, the description the source goes by.  Light (no dulwich): the
  factory reads it to dispatch.
* :mod:`~cronstable.sources.git.transport` — reaching the remote: credentials, a
  dulwich client per fetch with every wait bounded, what a failed fetch means.
* :mod:`~cronstable.sources.git.refs` — which commit a name means: the ref followed
  on the remote, a revision of a local repository.
* :mod:`~cronstable.sources.git.cache` — the bare cache repository per remote URL:
  mirrored branches and tags, the applied commit recorded, locks and repacks.
* :mod:`~cronstable.sources.git.files` — a commit's files as a snapshot, from the
  cache or from a local repository (``cronstable diff git:REPO@REF``).
* :mod:`~cronstable.sources.git.source` — :class:`~cronstable.sources.git.source.GitSource`:
  polling, nudges, back-off, the last good revision; the parts above put together.

Every module logs to the one logger ``cronstable.sources.git``.  Nothing is
re-exported here: importing the package loads none of its modules.
"""

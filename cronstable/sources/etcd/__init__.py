"""etcd as a configuration source: every key under a prefix is a file.

* :mod:`~cronstable.sources.etcd.spec` — the spec string (``etcd://HOST:PORT/PREFIX/``):
  parsing, checking, the description the source goes by.  Light: the factory reads it
  to dispatch.
* :mod:`~cronstable.sources.etcd.source` —
  :class:`~cronstable.sources.etcd.source.EtcdSource`: consistent snapshots, the watch,
  revisions, the last good snapshot.

Both log to the one logger ``cronstable.sources.etcd``.  Nothing is re-exported here.
"""

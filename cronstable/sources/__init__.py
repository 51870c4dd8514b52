"""Configuration sources: where revisions come from (never how they are parsed).

The core knows only :class:`~cronstable.sources.base.Source`; concrete backends
are imported lazily by :func:`~cronstable.sources.factory.open_source` from a
source spec.
"""

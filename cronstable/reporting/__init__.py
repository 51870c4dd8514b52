"""Reports: what a finished run or a missed fire tells the outside world.

* :mod:`.base` — the one base class, :class:`~.base.Reporter`, and the
  :class:`~.base.Message` every reporter reads (the run record, the template
  variables, rendering with a fallback).
* :mod:`.registry` — the reporters by configuration key; the only module that
  names a concrete reporter (each is imported when first used).
* one module per reporter: :mod:`.mail`, :mod:`.sentry`, :mod:`.shell`,
  :mod:`.webhook`.
* :mod:`.dispatcher` — hears the scheduler (a report listener), applies flood
  control and runs every enabled reporter as its own task, bounded by its timeout.
* :mod:`.statsd` — not a reporter: a run listener sending yacron's statsd datagrams.
"""

"""Workflows: jobs that depend on jobs.

:mod:`.dag` is the pure core (readiness, ``runWhen``, skip propagation, outcome,
cycles); the loader reads definitions with it (:mod:`cronstable.config`) and the
scheduler asks it what to start (:mod:`cronstable.runtime.workflows`).  A leaf:
it imports nothing of cronstable.
"""

"""The daemon's runtime: running jobs as processes (and, later, scheduling them)."""

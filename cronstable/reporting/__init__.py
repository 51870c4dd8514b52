"""Telling the outside world about runs: reporters, templates, statsd."""

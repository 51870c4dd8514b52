"""The composition root: :func:`cronstable.daemon.build.build_daemon` makes every part of
a daemon and wires them together, in one place (the command line only parses and calls
it).  Nothing below this package imports it."""

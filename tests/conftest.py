"""Shared test fixtures: each backend's real servers live in a module of their own."""

pytest_plugins = ["etcd_server", "daemon_proc"]

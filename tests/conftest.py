"""Shared test fixtures, each kind in a plugin module of its own:

* ``etcd_server``: real etcd servers on loopback (``etcd_server``, ``shared_etcd_server``,
  ``etcd_prefix``, ``tls_etcd_server``);
* ``lease_server``: the Kubernetes Lease API's conformance double (``lease_server``,
  ``own_lease_server``, ``kube_namespace``);
* ``backends``: every cluster and state store in turn (``cluster_backend``,
  ``own_cluster_backend``, ``state_backend``);
* ``daemon_proc``: ``cronstable run`` as a real process (``DaemonProcess``, ``wait_for``,
  ``until``, ``http``, the fixture ``daemon_procs``).
"""

pytest_plugins = ["etcd_server", "lease_server", "backends", "daemon_proc", "manual_harness"]

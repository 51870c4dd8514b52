"""Reconciling what runs with what a revision asks for.

``plan()`` is pure and shared by the daemon and ``cronstable diff``, so what a
diff shows is exactly what the daemon will do; ``Applier`` is the only code
that changes the running daemon, and applies a revision whole or not at all.
"""

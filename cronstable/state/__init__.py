"""Durable state: records that outlive the daemon process (:mod:`.base`)."""

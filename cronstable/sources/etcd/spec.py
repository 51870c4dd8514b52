"""The etcd source's spec: ``etcd://HOST:PORT/PREFIX/``, or ``etcds://…`` for TLS with
``?ca=FILE&cert=FILE&key=FILE``; a login comes from the environment, never the spec.

Parsing and checking a spec, and the name a source goes by (:func:`describe`).  Light
(neither asyncio nor aiohttp until a spec is parsed): the factory reads it to dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cronstable.sources.base import SourceError

if TYPE_CHECKING:
    from cronstable.etcd import EtcdTLS

SCHEMES = ("etcd", "etcds")


@dataclass(frozen=True, slots=True)
class EtcdSpec:
    endpoint: str
    """``http://HOST:PORT``, or ``https://HOST:PORT`` for ``etcds://``."""
    prefix: str
    tls: EtcdTLS | None = None
    """``etcds://``: the CA (``ca=``) and client certificate (``cert=``, ``key=``)."""


def parse_etcd_spec(spec: str) -> EtcdSpec:
    """``etcd://HOST:PORT/PREFIX/``, or ``etcds://…?ca=&cert=&key=`` (see cronstable.etcd)."""
    from cronstable.etcd import parse_etcd_url

    usage = "etcd://HOST:PORT/PREFIX/ or etcds://HOST:PORT/PREFIX/?ca=&cert=&key="
    try:
        url = parse_etcd_url(spec)
    except ValueError as exc:
        raise SourceError(f"not an etcd source spec: {exc} ({usage})") from None
    if url.options:
        raise SourceError(
            f"unknown etcd source option(s) {', '.join(sorted(url.options))} "
            "(the options are ca, cert and key, with etcds://)"
        )
    prefix = url.path if url.path.endswith("/") else url.path + "/"
    if prefix == "/":
        raise SourceError(f"an etcd source needs a key prefix ({usage})")
    return EtcdSpec(endpoint=url.endpoint, prefix=prefix, tls=url.tls)


def describe(spec: EtcdSpec) -> str:
    """The spec that names this source (``etcd://HOST:PORT/PREFIX/``, no TLS options)."""
    host_port = spec.endpoint.split("://", 1)[-1].rstrip("/")
    scheme = "etcds" if spec.endpoint.startswith("https://") else "etcd"
    return f"{scheme}://{host_port}/{spec.prefix.lstrip('/')}"

"""What a revision configures about answering requests, swapped whole at commit."""

from __future__ import annotations

from dataclasses import dataclass, field

from cronstable.config.models import BODY_TIMEOUT, WEBHOOK_MAX_BODY, WebConfig
from cronstable.web.auth import Token
from cronstable.web.listeners import parse_listen


@dataclass(frozen=True, slots=True)
class Settings:
    tokens: tuple[Token, ...] = ()
    metrics_public: bool = False
    github_secret: bytes | None = None
    allowed_hosts: frozenset[str] = frozenset()
    """web.allowedHosts, lower case, without ports."""
    listen_hosts: frozenset[str] = frozenset()
    """The hosts of the http:// and https:// listen URLs, lower case."""
    body_timeout: float = BODY_TIMEOUT
    webhook_max_body: int = WEBHOOK_MAX_BODY
    webhook_budget: int = 4 * WEBHOOK_MAX_BODY

    @classmethod
    def of(
        cls, config: WebConfig, tokens: tuple[Token, ...], github_secret: bytes | None
    ) -> Settings:
        hosts = (parse_listen(url) for url in config.listen)
        return cls(
            tokens=tokens,
            metrics_public=config.metrics_public,
            github_secret=github_secret,
            allowed_hosts=frozenset(config.allowed_hosts),
            listen_hosts=frozenset(a.host.lower() for a in hosts if a.scheme != "unix"),
            body_timeout=config.body_timeout,
            webhook_max_body=config.webhook_max_body_bytes,
            webhook_budget=config.webhook_budget,
        )


@dataclass(slots=True)
class Holder:
    settings: Settings = field(default_factory=Settings)

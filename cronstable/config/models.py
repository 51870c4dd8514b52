"""The configuration format, defined once as pydantic models.

Field aliases are the YAML spelling (yacron's camelCase); attribute names are
snake_case.  Every default here is yacron 0.19's.  The JSON Schema in
``schema/cronstable.schema.json`` is generated from these models
(:mod:`cronstable.config.jsonschema`), so descriptions and examples written
here are what editors show on hover.

Models are frozen; unknown keys are errors (the loader adds a did-you-mean).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import string
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cronstable.config.types import (
    Flag,
    Int,
    Number,
    OptDuration,
    OptInt,
    OptMoment,
    OptNumber,
    OptSize,
    OptText,
    Size,
    Text,
    to_flag,
    to_list,
    to_text,
)
from cronstable.errors import KeyPath
from cronstable.schedule import ScheduleError, parse_schedule
from cronstable.templates import TemplateError, compile_template

DEFAULT_SUBJECT_TEMPLATE = (
    "Cron job '{{name}}' {% if success %}completed{% else %}failed{% endif %}"
)
DEFAULT_BODY_TEMPLATE = """
{% if fail_reason -%}
(job failed because {{fail_reason}})
{% endif %}
{% if stdout and stderr -%}
STDOUT:
---
{{stdout}}
---
STDERR:
{{stderr}}
{% elif stdout -%}
{{stdout}}
{% elif stderr -%}
{{stderr}}
{% else -%}
(no output was captured)
{% endif %}
{% if suppressed_count -%}
({{suppressed_count}} earlier reports were held back by rateLimit)
{% endif %}
"""


class Model(BaseModel):
    """Base of every configuration model: frozen, strict about unknown keys."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=False,
        use_attribute_docstrings=True,
    )

    def __eq__(self, other: object) -> bool:
        # a model is mostly compared with its own default instance (the fingerprint's
        # exclude_defaults): the identity answers at once, without walking its fields
        return self is other or super().__eq__(other)

    @model_validator(mode="before")
    @classmethod
    def _empty_section_is_default(cls, data: Any) -> Any:
        """``onFailure:`` with nothing after it means the defaults, not an error."""
        if isinstance(data, dict) and None in data.values():  # a C scan; rarely true
            nested = section_keys(cls)
            if nested and any(data.get(key, 0) is None for key in nested):
                data = {k: v for k, v in data.items() if not (v is None and k in nested)}
        return data


@functools.cache
def section_keys(model: type[BaseModel]) -> frozenset[str]:
    """Keys of ``model`` whose value is itself a model with defaults (empty means defaults)."""
    return frozenset(
        info.alias or name
        for name, info in model.model_fields.items()
        if isinstance(info.annotation, type)
        and issubclass(info.annotation, BaseModel)
        and not info.is_required()
    )


# ---------------------------------------------------------------- small pieces

_M = TypeVar("_M", bound=BaseModel)


def _shared_factory(instance: _M) -> Callable[[], _M]:
    """A default that hands out one frozen instance.

    A plain model default is deep-copied for every job when it holds a list or a
    dict (pydantic cannot tell it is frozen all the way down); a factory returning
    the same instance costs nothing, and sharing is safe because models are frozen.
    """
    return lambda: instance


def _shared(instance: _M) -> Any:
    return Field(default_factory=_shared_factory(instance))


def _text_list(value: Any) -> Any:
    value = [value] if isinstance(value, str) else to_list(value)
    if isinstance(value, list | tuple):
        return [to_text(v) for v in value]
    return value


# json_schema_input_type: what the validator takes, so the JSON Schema accepts it too
TextList = Annotated[
    list[str], BeforeValidator(_text_list, json_schema_input_type=list[str] | str | None)
]


def _command(value: Any) -> str | list[str]:
    if isinstance(value, list | tuple):
        if not value:
            raise PydanticCustomError("command", "a command list must not be empty")
        return [to_text(v) for v in value]
    text = to_text(value)
    if not text.strip():
        raise PydanticCustomError("command", "the command must not be empty")
    return text


Command = Annotated[str | list[str], BeforeValidator(_command)]


class Hides:
    """Marks a text field (``Annotated[..., CREDENTIAL_URL]``) that is or holds a secret
    without being a :class:`SecretSource` (which marks itself by its type):
    :mod:`cronstable.config.secrets` finds the marked fields, so errors hide them and
    ``GET /config`` shows them as digests."""

    __slots__ = ("kind",)

    def __init__(self, kind: Literal["secret", "url"]) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"Hides({self.kind!r})"


SECRET_TEXT = Hides("secret")
"""The whole text is a secret."""
CREDENTIAL_URL = Hides("url")
"""A URL whose userinfo (``user:password@``) and query values are secrets."""


class SecretSource(Model):
    """A secret, read when it is needed: value, else fromFile, else fromEnvVar
    (the first one set wins; the loader warns when more than one is set)."""

    value: OptText = None
    """The secret itself, inline. Prefer fromFile or fromEnvVar for real secrets."""
    from_file: OptText = Field(None, alias="fromFile")
    """Path of a file holding the secret (surrounding whitespace is stripped)."""
    from_env_var: OptText = Field(None, alias="fromEnvVar")
    """Name of an environment variable of the daemon holding the secret."""

    def set_keys(self) -> list[str]:
        """The keys set, in precedence order (yacron's: value, fromFile, fromEnvVar)."""
        return [
            key
            for key, given in (
                ("value", self.value),
                ("fromFile", self.from_file),
                ("fromEnvVar", self.from_env_var),
            )
            if given is not None
        ]

    def chosen(self) -> tuple[str, str] | None:
        """(key, text) of the source that is used: the first set, in precedence order."""
        keys = self.set_keys()
        if not keys:
            return None
        text = {"value": self.value, "fromFile": self.from_file, "fromEnvVar": self.from_env_var}
        return keys[0], str(text[keys[0]])


@functools.cache
def secret_paths(model: type[BaseModel]) -> tuple[tuple[tuple[str, ...], KeyPath], ...]:
    """Where ``model`` holds secrets: (attribute names, YAML key path) of each SecretSource."""
    found: list[tuple[tuple[str, ...], KeyPath]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            continue
        key = info.alias or name
        if annotation is SecretSource:
            found.append(((name,), (key,)))
        else:
            found.extend(((name, *a), (key, *k)) for a, k in secret_paths(annotation))
    return tuple(found)


def _template(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        compile_template(text)
    except TemplateError as exc:
        raise PydanticCustomError(
            "template", "the template does not compile: {error}", {"error": str(exc)}
        ) from None
    return text


Template = Annotated[Text, AfterValidator(_template)]
"""A Jinja2 template, compiled when the configuration loads."""
OptTemplate = Annotated[OptText, AfterValidator(_template)]

REPORT_TIMEOUT = 30.0


def _timeout() -> Any:
    return Field(REPORT_TIMEOUT, gt=0, examples=[30])


class ReporterSettings(Model):
    """What every reporter's settings have."""

    REQUIRED: ClassVar[tuple[str, ...]] = ()
    """The keys (YAML spelling) that must all be set for the reporter to send."""

    timeout: Number = _timeout()
    """Seconds this reporter may take for one report, all its attempts together."""

    def set_required(self) -> list[str]:
        """The required keys that are set."""
        return [key for key in self.REQUIRED if self._is_set(key)]

    def _is_set(self, key: str) -> bool:
        for name, info in type(self).model_fields.items():
            if (info.alias or name) == key:
                value = getattr(self, name)
                if isinstance(value, SecretSource):
                    return bool(value.set_keys())
                return value is not None and value != []
        raise KeyError(key)

    def incomplete(self) -> str | None:
        """Why the merged settings are an error (judged on a job, not on defaults)."""
        return None

    @property
    def enabled(self) -> bool:
        """Every required key is set (the reporter is off otherwise, as yacron's are)."""
        return len(self.set_required()) == len(self.REQUIRED)


class SentryReport(ReporterSettings):
    """Send an event to Sentry."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("dsn",)

    dsn: SecretSource = _shared(SecretSource())
    """The project's DSN. The reporter is off until a DSN resolves."""
    fingerprint: Annotated[
        list[Template],
        BeforeValidator(_text_list, json_schema_input_type=list[str] | str | None),
    ] = Field(default_factory=lambda: ["cronstable", "{{ environment.HOSTNAME }}", "{{ name }}"])
    """Jinja2 templates grouping events in Sentry (lists merge by appending, as yacron)."""
    level: OptText = None
    """Event level (error, warning, info, ...)."""
    extra: dict[str, Text] = Field(default_factory=dict)
    """Extra data attached to every event."""
    body: Template = DEFAULT_SUBJECT_TEMPLATE + "\n" + DEFAULT_BODY_TEMPLATE
    """Jinja2 template of the event message."""
    environment: OptText = None
    """Sentry environment name."""
    max_string_length: Int = Field(8192, alias="maxStringLength", ge=1)
    """Longest string sent to Sentry."""


def _recipients(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return _text_list(value) if value is not None else None


class MailReport(ReporterSettings):
    """Send an email through an SMTP server."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("from", "to", "smtpHost")

    from_: OptText = Field(None, alias="from", examples=["cron@example.com"])
    """Sender address. The reporter is off until from and to are set."""
    to: Annotated[list[str] | str | None, BeforeValidator(_recipients)] = Field(
        None, examples=[["ops@example.com"], "ops@example.com, dev@example.com"]
    )
    """Recipients: a list, or yacron's comma-separated string."""
    smtp_host: OptText = Field(None, alias="smtpHost", examples=["smtp.example.com"])
    """SMTP server host (required once from and to are set)."""
    smtp_port: Int = Field(25, alias="smtpPort", ge=1, le=65535)
    """SMTP server port."""
    subject: Template = DEFAULT_SUBJECT_TEMPLATE
    """Jinja2 template of the subject."""
    body: Template = DEFAULT_BODY_TEMPLATE
    """Jinja2 template of the body (autoescaped when html is set)."""
    username: OptText = None
    """SMTP login user name."""
    password: SecretSource = _shared(SecretSource())
    """SMTP login password."""
    tls: Flag = False
    """Connect with implicit TLS (SMTPS)."""
    starttls: Flag = False
    """Upgrade the connection with STARTTLS."""
    validate_certs: Flag = False
    """Verify the server's certificate (yacron's default is false)."""
    html: Flag = False
    """Send the body as HTML."""

    def incomplete(self) -> str | None:
        if self.from_ is not None and self.to and self.smtp_host is None:
            return "mail has from and to but no smtpHost: set the SMTP server's host"
        return None


def _optional_command(value: Any) -> Any:
    return None if value is None else _command(value)


class ShellReport(ReporterSettings):
    """Run a command; the run's details are in its environment."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("command",)

    shell: Text = Field("/bin/sh", min_length=1)
    """Shell that runs a string command."""
    command: Annotated[str | list[str] | None, BeforeValidator(_optional_command)] = None
    """Command to run (string or list). The reporter is off until set."""


def _headers(value: Any) -> Any:
    """A header written as plain text is taken as ``{value: TEXT}``."""
    if isinstance(value, dict):
        return {
            key: {"value": to_text(v)} if isinstance(v, str | int | float) else v
            for key, v in value.items()
        }
    return value


def _webhook_url(url: str | None) -> str | None:
    if url is not None and not re.match(r"^https?://[^/?#\s]", url, re.IGNORECASE):
        raise PydanticCustomError(
            "webhook_url", "{url} is not an http:// or https:// URL", {"url": repr(url)}
        )
    return url


class WebhookReport(ReporterSettings):
    """POST the report to a URL (retried a few times on transient failures)."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("url",)

    url: Annotated[OptText, AfterValidator(_webhook_url), CREDENTIAL_URL] = Field(
        None, examples=["https://hooks.slack.com/services/T000/B000/XXXX"]
    )
    """Where to POST. The reporter is off until set."""
    headers: Annotated[dict[str, SecretSource], BeforeValidator(_headers)] = Field(
        default_factory=dict, examples=[{"Authorization": {"fromEnvVar": "HOOK_TOKEN"}}]
    )
    """Extra request headers; each value is text or a secret (value, fromFile,
    fromEnvVar). Header values are never logged."""
    format: Literal["json", "slack", "text"] = "json"
    """The request body: the run as JSON, a Slack message (``{"text": ...}``) or plain text."""
    body: OptTemplate = None
    """Jinja2 template of the message (slack and text); default: the mail subject and body."""


class Report(Model):
    """Where to report an outcome. Each reporter is off until its required fields are set."""

    sentry: SentryReport = _shared(SentryReport())
    mail: MailReport = _shared(MailReport())
    shell: ShellReport = _shared(ShellReport())
    webhook: WebhookReport = _shared(WebhookReport())

    def reporters(self) -> dict[str, ReporterSettings]:
        """Every reporter's settings by key (sentry, mail, shell, webhook)."""
        return {
            info.alias or name: getattr(self, name)
            for name, info in type(self).model_fields.items()
        }


def _rate_limit(default: float) -> Any:
    return Field(default, alias="rateLimit", ge=0, examples=[3600])


class Retry(Model):
    """Retrying a failed run with exponential backoff."""

    maximum_retries: Int = Field(0, alias="maximumRetries", ge=-1)
    """How many retries after a failure; 0 for none, -1 for forever."""
    initial_delay: Number = Field(1, alias="initialDelay", ge=0)
    """Seconds before the first retry."""
    maximum_delay: Number = Field(300, alias="maximumDelay", ge=0)
    """Ceiling of the delay between retries, in seconds."""
    backoff_multiplier: Number = Field(2, alias="backoffMultiplier", ge=1)
    """Each delay is the previous one times this."""


class OnFailure(Model):
    retry: Retry = _shared(Retry())
    report: Report = _shared(Report())
    rate_limit: Number = _rate_limit(0)
    """Send at most one report per this many seconds (0: every one); the ones held back
    are counted and summarised in the next one sent."""


class OnReport(Model):
    report: Report = _shared(Report())
    rate_limit: Number = _rate_limit(0)
    """Send at most one report per this many seconds (0: every one); the ones held back
    are counted and summarised in the next one sent."""


class OnMissed(Model):
    report: Report = _shared(Report())
    rate_limit: Number = _rate_limit(3600)
    """Send at most one report per reason per this many seconds (0: every one)."""


class OnPaused(Model):
    """Reports for a job paused for longer than ``alertAfter`` (a pause forgotten)."""

    alert_after: OptDuration = Field(86400.0, alias="alertAfter", ge=0, examples=["4h", 3600])
    """How long a pause (``suspend``, or one asked through the API) may last before it
    is reported, once per pause (seconds, or a duration like ``4h``; default a day)."""
    report: Report = _shared(Report())
    rate_limit: Number = _rate_limit(0)
    """Send at most one report per this many seconds (0: every one)."""


class OnLate(Model):
    """Reports for a scheduled fire that has not started within ``grace`` of its planned
    start (the leader down, the pool full, the node dead), once per fire across the
    cluster when the nodes share a state store."""

    grace: OptDuration = Field(None, ge=0, examples=["5m", 120])
    """How long after its planned start (its time, delayed by ``jitter``) a fire may still
    start before it is reported late (seconds, or a duration like ``5m``); unset: no late
    alerts."""
    report: Report = _shared(Report())
    rate_limit: Number = _rate_limit(3600)
    """Send at most one report per this many seconds (0: every one); the ones held back
    are counted and summarised in the next one sent."""


class OnStuck(Model):
    """Reports for a run that has been going for longer than it should, once per run."""

    expected_duration: OptDuration = Field(
        None, alias="expectedDuration", gt=0, examples=["30m", 1800]
    )
    """A run going for longer than this is reported stuck (seconds, or a duration like
    ``1h30m``); it is not stopped (that is ``executionTimeout``'s)."""
    p95_factor: OptNumber = Field(None, alias="p95Factor", gt=0, examples=[3])
    """Without ``expectedDuration``: a run going for longer than this many times the 95th
    percentile of the durations of the last 20 runs (the successful ones; at least 5 of
    them, else nothing is judged) is reported stuck."""
    report: Report = _shared(Report())
    rate_limit: Number = _rate_limit(0)
    """Send at most one report per this many seconds (0: every one)."""


class OnStale(Model):
    """Reports when the last successful run is older than ``maxSuccessAge``, once until a
    run succeeds again."""

    max_success_age: OptDuration = Field(None, alias="maxSuccessAge", gt=0, examples=["26h", 90000])
    """How old the last success may grow (seconds, or a duration like ``26h``); a job
    that never succeeded counts from when this daemon first applied it. Unset: no stale
    alerts."""
    report: Report = _shared(Report())
    rate_limit: Number = _rate_limit(0)
    """Send at most one report per this many seconds (0: every one)."""


class Suspend(Model):
    """A pause written in the repository: fires are skipped (counted as ``paused``) while
    it holds; a start on request still runs."""

    until: OptMoment = Field(None, examples=["2026-05-04T09:00:00+02:00"])
    """When the pause ends by itself (ISO 8601 with an offset, or Z); unset: until a
    revision removes it."""
    reason: OptText = Field(None, examples=["the warehouse is being migrated (OPS-1234)"])
    """Why the job is paused: shown in /status, the dashboard, the metric and reports."""

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A pause without end or reason is ``true``, as written (a diff shows it so)."""
        if self.until is None and self.reason is None:
            return True
        return handler(self)


def _suspend(value: Any) -> Any:
    """``suspend: true`` is a pause without reason or end; ``false`` (or empty) none."""
    if value is None or isinstance(value, dict | Suspend):
        return value
    return Suspend() if to_flag(value) else None


SuspendSpec = Annotated[
    Suspend | None, BeforeValidator(_suspend, json_schema_input_type=bool | Suspend | None)
]


class FailsWhen(Model):
    """What makes a run a failure: any condition that is set and holds."""

    produces_stdout: Flag = Field(False, alias="producesStdout")
    """The run wrote to standard output (needs captureStdout)."""
    produces_stderr: Flag = Field(True, alias="producesStderr")
    """The run wrote to standard error (needs captureStderr)."""
    nonzero_return: Flag = Field(True, alias="nonzeroReturn")
    """The run exited with a code other than 0."""
    always: Flag = False
    """Every run is a failure (useful to test reporting)."""


class EnvVar(Model):
    key: Text = Field(examples=["PATH"])
    """Variable name."""
    value: Text = Field(examples=["/usr/local/bin:/usr/bin:/bin"])
    """Variable value, taken as written (1.10 stays 1.10)."""

    @field_validator("value")
    @classmethod
    def _value_form(cls, value: str) -> str:
        if "\0" in value:
            raise PydanticCustomError("env_value", "a variable's value cannot hold a NUL byte")
        return value

    @field_validator("key")
    @classmethod
    def _key_form(cls, key: str) -> str:
        if not key or "=" in key or "\0" in key:
            raise PydanticCustomError(
                "env_key", "{key} is not a valid variable name", {"key": repr(key)}
            )
        return key


class Statsd(Model):
    """Send start/stop/success/duration metrics over UDP to a statsd server."""

    host: Text
    port: Int = Field(ge=1, le=65535)
    prefix: Text = Field(examples=["cron.jobs.backup"])


class Monitor(Model):
    """Resource limits judged when a run has exited: a run over one fails; nothing is killed."""

    max_rss: OptSize = Field(None, alias="maxRss", gt=0, examples=["512M", 2147483648])
    """Largest resident set allowed to the job's biggest single process (bytes, or with
    K, M, G, T: powers of 1024)."""
    max_cpu_seconds: OptNumber = Field(None, alias="maxCpuSeconds", gt=0, examples=[600])
    """User + system CPU seconds allowed to the job's process and the descendants it waited
    for."""


def known_zone(zone: str | None) -> str | None:
    """``zone`` when it names an IANA time zone (None stays None)."""
    if zone is None:
        return None
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # a tzdata directory is an OSError
        raise PydanticCustomError(
            "timezone", "unknown time zone {zone}", {"zone": repr(zone)}
        ) from None
    return zone


_USER_RE = re.compile(r"^(?:\d+|[A-Za-z_][A-Za-z0-9._-]{0,31}\$?)$")


def _principal(value: Any) -> Any:
    if value is None:
        return None
    text = to_text(value).strip()
    if not _USER_RE.match(text):
        raise PydanticCustomError(
            "principal", "{value} is neither a name nor a numeric id", {"value": repr(text)}
        )
    return text


Principal = Annotated[str | None, BeforeValidator(_principal)]

_PREFIX_FIELDS = frozenset({"job_name", "stream_name"})

ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace", "BufferOne", "BufferAll"]
BUFFER_POLICIES = frozenset({"BufferOne", "BufferAll"})
"""The policies under which a fire waits for the runs going instead of starting."""
DEFAULT_BUFFER_LIMIT = 10
MAX_BUFFER_LIMIT = 1000
"""The largest ``bufferLimit``: a job's buffer is a bound, not a backlog store."""


def _workflow_policy(value: Any) -> Any:
    """A workflow's runs are not buffered: BufferOne and BufferAll are refused with why."""
    if isinstance(value, str) and value in BUFFER_POLICIES:
        raise PydanticCustomError(
            "workflow_buffer",
            "{policy} buffers a job's fires; a workflow's runs are not buffered: use Allow, "
            "Forbid or Replace here (a file's defaults give concurrencyPolicy to its workflows "
            "too: set it on the jobs instead)",
            {"policy": value},
        )
    return value


class JobSettings(Model):
    """Every job setting that may also be given under ``defaults``."""

    shell: Text = Field("/bin/sh", min_length=1, examples=["/bin/bash"])
    """Shell that runs a string command as `[shell, "-c", command]`."""
    utc: Flag = True
    """Read the schedule in UTC (true) or in the daemon's local time zone (false)."""
    timezone: OptText = Field(None, examples=["Europe/Lisbon", "America/New_York"])
    """IANA time zone of the schedule; overrides utc."""
    environment: Annotated[
        list[EnvVar], BeforeValidator(to_list, json_schema_input_type=list[EnvVar] | None)
    ] = Field(default_factory=list)
    """Variables added to the daemon's environment (the last entry of a key wins)."""
    env_file: OptText = Field(None, examples=["env/backup.env"])
    """File of KEY=VALUE lines, relative to the file naming it; environment wins over it."""
    capture_stdout: Flag = Field(False, alias="captureStdout")
    """Keep standard output for reports and failsWhen."""
    capture_stderr: Flag = Field(True, alias="captureStderr")
    """Keep standard error for reports and failsWhen."""
    save_limit: Int = Field(4096, alias="saveLimit", ge=0)
    """Lines of captured output kept: the first and last half."""
    max_line_length: Int = Field(16777216, alias="maxLineLength", ge=1)
    """Longest output line kept, in bytes; longer lines are dropped with a warning."""
    stream_prefix: Text = Field("[{job_name} {stream_name}] ", alias="streamPrefix")
    """Prefix of output lines mirrored to the daemon's own output."""
    fails_when: FailsWhen = Field(default_factory=_shared_factory(FailsWhen()), alias="failsWhen")
    on_failure: OnFailure = Field(default_factory=_shared_factory(OnFailure()), alias="onFailure")
    """Retries and reports after a failed run."""
    on_permanent_failure: OnReport = Field(
        default_factory=_shared_factory(OnReport()), alias="onPermanentFailure"
    )
    """Reports once retries are exhausted (or when there are none)."""
    on_success: OnReport = Field(default_factory=_shared_factory(OnReport()), alias="onSuccess")
    """Reports after a successful run."""
    on_missed: OnMissed = Field(default_factory=_shared_factory(OnMissed()), alias="onMissed")
    """Reports for a fire that did not run (skipped by Forbid, found too late after a
    clock jump, past startingDeadlineSeconds)."""
    concurrency_policy: ConcurrencyPolicy = Field("Allow", alias="concurrencyPolicy")
    """What a fire does while a run is still going: start another (Allow), skip (Forbid),
    stop the old run and start anew (Replace), wait for it (BufferOne: one fire waits,
    later ones are skipped as ``buffer_full``), or queue behind it (BufferAll: up to
    ``bufferLimit`` fires wait and run one after another)."""
    buffer_limit: Int = Field(
        DEFAULT_BUFFER_LIMIT, alias="bufferLimit", ge=1, le=MAX_BUFFER_LIMIT, examples=[10, 3]
    )
    """Under ``concurrencyPolicy: BufferAll``, the most fires that wait for the runs going
    (a fire past it is skipped as ``buffer_full``); other policies ignore it."""
    execution_timeout: OptNumber = Field(None, alias="executionTimeout", gt=0)
    """Seconds a run may take before it is stopped and fails with code -100."""
    kill_timeout: Number = Field(30, alias="killTimeout", ge=0)
    """Seconds between SIGTERM and SIGKILL when a run is stopped."""
    user: Principal = Field(None, examples=["backup", "1000"])
    """Run as this user (name or uid); the daemon must be root."""
    group: Principal = Field(None, examples=["backup", "1000"])
    """Run with this group (name or gid); the daemon must be root."""
    statsd: Statsd | None = None
    """Send start/stop/success/duration (and cpu/max_rss) of every run to statsd."""
    monitor: Monitor | None = None
    """Limits on the CPU time and memory of a run (every run's use is recorded anyway)."""
    enabled: Flag = True
    """A disabled job stays in the configuration but never fires."""
    starting_deadline_seconds: OptNumber = Field(None, alias="startingDeadlineSeconds", ge=0)
    """Fires missed by at most this many seconds (suspend, clock jump, restart) run once,
    late; unset: missed fires are skipped and logged."""
    suspend: SuspendSpec = Field(
        None, examples=[True, {"until": "2026-05-04T09:00:00Z", "reason": "migration"}]
    )
    """Pause the job: ``true``, or ``{until, reason}``. Its fires are skipped and counted
    as ``paused`` (never caught up afterwards); a start on request still runs. A pause
    asked through the API (``POST /jobs/{name}/pause``) is kept apart: removing this
    key does not lift it."""
    on_paused: OnPaused = Field(default_factory=_shared_factory(OnPaused()), alias="onPaused")
    """Reports when the job has been paused for longer than ``alertAfter``."""
    jitter: OptDuration = Field(None, ge=0, examples=["5m", 30])
    """Delay each scheduled fire's start by an offset in [0, jitter) (seconds, or a
    duration like ``90s`` or ``1h30m``), the same on every node: a hash of the job's name
    and the fire's time, kept below the next fire. Never applied to retries, catch-ups,
    backfills or starts on request; the run's scheduled time stays the fire's."""
    on_late: OnLate = Field(default_factory=_shared_factory(OnLate()), alias="onLate")
    """Reports for a fire not started within ``grace`` of its planned start."""
    on_stuck: OnStuck = Field(default_factory=_shared_factory(OnStuck()), alias="onStuck")
    """Reports for a run going longer than ``expectedDuration`` (or ``p95Factor`` times
    the 95th percentile of its last runs)."""
    on_stale: OnStale = Field(default_factory=_shared_factory(OnStale()), alias="onStale")
    """Reports when the last success is older than ``maxSuccessAge``."""
    cluster_policy: Literal["EveryNode", "Leader", "PreferLeader"] = Field(
        "EveryNode", alias="clusterPolicy"
    )
    """Which nodes of a cluster run the job."""
    concurrency_scope: Literal["node", "cluster"] = Field("node", alias="concurrencyScope")
    """Whether concurrencyPolicy counts runs on this node or in the whole cluster."""
    priority: OptInt = Field(None, ge=-20, le=19)
    """Nice value of the job's processes (-20..19); unset inherits the daemon's."""
    pool: OptText = Field(None, examples=["warehouse-db"])
    """Name of a pool (top-level ``pools``) whose slots cap how many runs of the jobs
    naming it go at once; a run that finds the pool full waits in its queue."""
    pool_priority: Int = Field(0, alias="poolPriority", examples=[10, -5])
    """Place in the pool's queue: a higher value is admitted first; equal values in the
    order they began waiting."""
    pool_timeout: OptDuration = Field(None, alias="poolTimeout", ge=0, examples=["10m", 600])
    """Longest wait in the pool's queue (seconds, or a duration like ``90s`` or ``1h30m``;
    0: do not wait), after which the launch is skipped as missed with reason
    ``pool_timeout``; unset: wait until admitted."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, zone: str | None) -> str | None:
        return known_zone(zone)

    @field_validator("stream_prefix")
    @classmethod
    def _prefix_fields(cls, prefix: str) -> str:
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(prefix) if name is not None}
        except ValueError as exc:
            raise PydanticCustomError(
                "stream_prefix", "invalid prefix template: {error}", {"error": str(exc)}
            ) from None
        unknown = names - _PREFIX_FIELDS
        if unknown:
            raise PydanticCustomError(
                "stream_prefix",
                "unknown placeholder {names}; use {known}",
                {
                    "names": ", ".join(sorted("{" + n + "}" for n in unknown)),
                    "known": "{job_name} and {stream_name}",
                },
            )
        return prefix


ReportMoment = OnReport | OnFailure | OnMissed | OnPaused | OnLate | OnStuck | OnStale


def report_moments(settings: JobSettings) -> tuple[tuple[str, ReportMoment], ...]:
    """(YAML key, settings) of each report moment of a job."""
    return (
        ("onFailure", settings.on_failure),
        ("onPermanentFailure", settings.on_permanent_failure),
        ("onSuccess", settings.on_success),
        ("onMissed", settings.on_missed),
        ("onPaused", settings.on_paused),
        ("onLate", settings.on_late),
        ("onStuck", settings.on_stuck),
        ("onStale", settings.on_stale),
    )


class JobDefaults(JobSettings):
    """Settings applied to every job of this file (and of files including it)."""


class ScheduleFields(Model):
    """yacron's mapping form of a schedule; a missing field is `*`."""

    second: Text = "0"
    minute: Text = "*"
    hour: Text = "*"
    day_of_month: Text = Field("*", alias="dayOfMonth")
    month: Text = "*"
    day_of_week: Text = Field("*", alias="dayOfWeek")
    year: Text = "*"


def _schedule_shape(value: Any) -> Any:
    if isinstance(value, dict | ScheduleFields):
        return value
    if isinstance(value, str):
        return value
    if value is None:  # `schedule:` with nothing after it
        raise PydanticCustomError(
            "schedule",
            "empty schedule: write a cron expression (like '0 3 * * *') or a mapping of fields",
        )
    raise PydanticCustomError(
        "schedule",
        "expected a cron expression or a mapping of fields, got {got}",
        {"got": "a list" if isinstance(value, list) else repr(value)},
    )


def _schedule_kind(value: Any) -> str:
    return "<fields>" if isinstance(value, dict | ScheduleFields) else "<expression>"


# A discriminated union validates only the branch that applies, so a bad mapping
# reports its own errors and not also "expected text".  Tags start with "<" so the
# loader can drop them from error locations.
ScheduleSpec = Annotated[
    # text only: an empty schedule, true or 5 is no schedule (other text fields are lenient)
    Annotated[str, Tag("<expression>"), WithJsonSchema({"type": "string"})]
    | Annotated[ScheduleFields, Tag("<fields>")],
    Discriminator(_schedule_kind),
    BeforeValidator(_schedule_shape),
]


def schedule_source(spec: str | ScheduleFields) -> str | dict[str, str]:
    """What :func:`cronstable.schedule.parse_schedule` takes for a validated spec."""
    if isinstance(spec, str):
        return spec
    return spec.model_dump(by_alias=True)


_NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")


def _check_name(name: str, what: str = "job") -> str:
    if not name.strip():
        raise PydanticCustomError("name", "a {what} name must not be empty", {"what": what})
    if not _NAME_RE.match(name):
        raise PydanticCustomError(
            "name",
            "a {what} name must be 1-200 characters without control characters",
            {"what": what},
        )
    return name


def _as_text(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A field's value validated by ``handler``, or ``value`` itself when it is text: a
    name's and a schedule's own validators give text back as it is, so the two Python
    calls they cost (a name's to_text; a schedule's shape check and discriminator) are
    skipped for what nearly every job writes (measured: a twentieth of validating one)."""
    return value if type(value) is str else handler(value)


def _check_schedule(spec: str | ScheduleFields, info: ValidationInfo) -> str | ScheduleFields:
    name = info.data.get("name")  # validated before schedule: H items hash it
    try:
        parse_schedule(schedule_source(spec), name if isinstance(name, str) else None)
    except ScheduleError as exc:
        shown = f"{spec!r}: " if isinstance(spec, str) else ""
        raise PydanticCustomError(
            "schedule", "{spec}{error}", {"spec": shown, "error": str(exc)}
        ) from None
    return spec


SCHEDULE_EXAMPLES: list[Any] = [
    "*/5 * * * *",
    "0 3 * * mon-fri",
    "*/10 * * * * * *",
    "@daily",
    "@every 90s",
    "H H(0-5) * * *",
    {"minute": "*/2"},
]


class RunSettings(JobSettings):
    """What a job and a workflow's task both are: the job settings, a name and a command."""

    name: Text = Field(examples=["nightly-backup"])
    """Unique name of the job in the whole configuration."""
    command: Command = Field(
        examples=["pg_dump app > /backups/app.sql", ["rsync", "-a", "/src", "/dst"]]
    )
    """A string runs through `shell -c`; a list is executed directly."""
    stdin: OptText = Field(None, examples=["line one\nline two\n"])
    """Text fed to the command's standard input (a crontab's `%`); unset: /dev/null."""

    @field_validator("name", mode="wrap")
    @classmethod
    def _name_form(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> str:
        return _check_name(_as_text(value, handler))


class JobConfig(RunSettings):
    """One scheduled job."""

    schedule: ScheduleSpec = Field(examples=SCHEDULE_EXAMPLES)
    """Cron expression (5 fields; 6 add a year; 7 are second..year), an @alias,
    `@every 1h30m`, or a mapping; `H` items are hashed from the job's name, and a
    `CRON_TZ=Zone ` prefix sets the zone."""

    @field_validator("schedule", mode="wrap")
    @classmethod
    def _schedule_parses(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> str | ScheduleFields:
        return _check_schedule(_as_text(value, handler), info)


# ------------------------------------------------------------------ workflows

RunWhenName = Literal["allSucceeded", "allDone", "anyFailed", "allFailed"]
"""cronstable.workflows.dag.RunWhen, spelled out (the schema lists the values)."""


WORKFLOW_ONLY_KEYS = ("suspend", "onPaused", "jitter", "onLate", "onStale")
"""Job settings a task does not take: they belong to what is scheduled, its workflow
(a file's ``defaults`` give them to the workflow, not to its tasks)."""


def _without_workflow_keys(schema: dict[str, Any]) -> None:
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name in WORKFLOW_ONLY_KEYS:
            properties.pop(name, None)


class TaskConfig(RunSettings):
    """One task of a workflow: a job without a schedule of its own (every job setting
    applies but ``suspend``, ``onPaused``, ``jitter``, ``onLate`` and ``onStale``, which are
    the workflow's, and
    the file's defaults reach it as they reach jobs), started by its workflow's runs once
    its dependencies allow. Its name everywhere a job name appears (logs, metrics, the
    API, durable state) is ``WORKFLOW.TASK``."""

    model_config = ConfigDict(json_schema_extra=_without_workflow_keys)

    name: Text = Field(examples=["extract"])
    """The task's name, unique in its workflow, without a ``.``."""
    depends_on: TextList = Field(
        default_factory=list, alias="dependsOn", examples=[["extract"], ["transform-a", "b"]]
    )
    """Tasks of the same workflow this one waits for; none: it starts when the run does."""
    run_when: RunWhenName = Field(
        "allSucceeded", alias="runWhen", examples=["allSucceeded", "allDone", "anyFailed"]
    )
    """When the task runs once every dependency is done: ``allSucceeded`` (all of them
    succeeded), ``allDone`` (whatever they ended as), ``anyFailed`` (one failed, after its
    retries), ``allFailed`` (each failed). A task whose condition can no longer hold is
    ``skipped``, and its dependents decide on that. Needs dependsOn."""
    xcom_env: TextList = Field(
        default_factory=list, alias="xcomEnv", examples=[["extract.rows", "extract.path"]]
    )
    """Values of the tasks this one depends on (directly or through others) that its
    runs get as environment variables: each ``TASK.KEY`` (a value the task pushed with
    ``cronstable xcom push`` or wrote into ``$CRONSTABLE_XCOM_DIR``) becomes
    ``CRONSTABLE_XCOM_<TASK>_<KEY>``, in upper case with each character other than a
    letter or digit written ``_``; unset when the task left no such value."""

    @field_validator("name", mode="wrap")
    @classmethod
    def _name_form(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> str:
        name = _check_name(_as_text(value, handler), "task")
        if "." in name:
            raise PydanticCustomError(
                "name",
                "a task name cannot hold a '.': the task is known as WORKFLOW.TASK",
            )
        return name


class WorkflowSettings(Model):
    """A workflow's own settings (its tasks aside)."""

    name: Text = Field(examples=["nightly-etl"])
    """Unique name of the workflow: no job or other workflow has it."""
    schedule: ScheduleSpec = Field(examples=SCHEDULE_EXAMPLES)
    """When a run starts: every schedule form a job takes (cron expression, @alias,
    @reboot, `@every`, a mapping, `H` hashed from the workflow's name, `CRON_TZ=`)."""
    utc: Flag = True
    """Read the schedule in UTC (true) or in the daemon's local time zone (false)."""
    timezone: Annotated[OptText, AfterValidator(known_zone)] = Field(
        None, examples=["Europe/Lisbon"]
    )
    """IANA time zone of the schedule; overrides utc."""
    enabled: Flag = True
    """A disabled workflow stays in the configuration but never fires."""
    starting_deadline_seconds: OptNumber = Field(None, alias="startingDeadlineSeconds", ge=0)
    """Fires missed by at most this many seconds (suspend, clock jump, restart) start a
    run once, late; unset: missed fires are skipped and logged."""
    cluster_policy: Literal["EveryNode", "Leader", "PreferLeader"] = Field(
        "EveryNode", alias="clusterPolicy"
    )
    """Which nodes of a cluster start the workflow's runs (a run's tasks run where the
    run started)."""
    concurrency_policy: Annotated[
        Literal["Allow", "Forbid", "Replace"], BeforeValidator(_workflow_policy)
    ] = Field("Allow", alias="concurrencyPolicy")
    """What a fire does while a run is still going: start another (Allow), skip (Forbid),
    or cancel the old run and start anew (Replace). BufferOne and BufferAll are for jobs:
    a workflow's runs are not buffered."""
    on_failure: OnReport = Field(default_factory=_shared_factory(OnReport()), alias="onFailure")
    """Reports once a run ended failed (a task failed: after its retries)."""
    on_success: OnReport = Field(default_factory=_shared_factory(OnReport()), alias="onSuccess")
    """Reports once a run ended succeeded (every task that ran succeeded)."""
    on_missed: OnMissed = Field(default_factory=_shared_factory(OnMissed()), alias="onMissed")
    """Reports for a fire that started no run (skipped by Forbid, found too late)."""
    statsd: Statsd | None = None
    """Send start/stop/success/duration of every run of the workflow to statsd (its tasks
    send their own with a statsd of their own)."""
    suspend: SuspendSpec = Field(
        None, examples=[True, {"until": "2026-05-04T09:00:00Z", "reason": "migration"}]
    )
    """Pause the workflow: ``true``, or ``{until, reason}``. Its fires start no run and
    are counted as ``paused`` (never caught up afterwards); a start on request still
    runs, and runs going finish. A pause asked through the API (``POST
    /workflows/{name}/pause``) is kept apart: removing this key does not lift it."""
    on_paused: OnPaused = Field(default_factory=_shared_factory(OnPaused()), alias="onPaused")
    """Reports when the workflow has been paused for longer than ``alertAfter``."""
    jitter: OptDuration = Field(None, ge=0, examples=["5m", 30])
    """Delay each scheduled fire's start by an offset in [0, jitter) (seconds, or a
    duration like ``90s``), the same on every node: a hash of the workflow's name and the
    fire's time, kept below the next fire. Never applied to catch-ups or starts on
    request; the run's scheduled time (its tasks' ``CRONSTABLE_SCHEDULED_TIME``) stays
    the fire's."""
    on_late: OnLate = Field(default_factory=_shared_factory(OnLate()), alias="onLate")
    """Reports for a fire that started no run within ``grace`` of its planned start."""
    on_stuck: OnStuck = Field(default_factory=_shared_factory(OnStuck()), alias="onStuck")
    """Reports for a run of the workflow going longer than ``expectedDuration`` (or
    ``p95Factor`` times the 95th percentile of its last runs); a file's defaults give
    ``onStuck`` to its jobs and tasks, not to the workflow."""
    on_stale: OnStale = Field(default_factory=_shared_factory(OnStale()), alias="onStale")
    """Reports when the workflow's last successful run is older than ``maxSuccessAge``."""

    @field_validator("name", mode="wrap")
    @classmethod
    def _name_form(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> str:
        return _check_name(_as_text(value, handler), "workflow")

    @field_validator("schedule", mode="wrap")
    @classmethod
    def _schedule_parses(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> str | ScheduleFields:
        return _check_schedule(_as_text(value, handler), info)


WORKFLOW_DEFAULT_KEYS = (
    "utc",
    "timezone",
    "enabled",
    "startingDeadlineSeconds",
    "clusterPolicy",
    "concurrencyPolicy",
    "onFailure",
    "onSuccess",
    "onMissed",
    "suspend",
    "onPaused",
    "jitter",
    "onLate",
    "onStale",
)
"""The keys of a file's ``defaults`` that reach its workflows too (``onFailure`` without
its ``retry``: a workflow's retries are its tasks'; not ``onStuck``: a task's expected
duration is not its workflow run's)."""


class WorkflowConfig(WorkflowSettings):
    """Jobs that depend on jobs: tasks started in the order their ``dependsOn`` allow, in
    parallel where it allows, each run of the workflow on the schedule's fires."""

    tasks: Annotated[
        list[TaskConfig], BeforeValidator(to_list, json_schema_input_type=list[TaskConfig] | None)
    ] = Field(min_length=1)
    """The workflow's tasks (at least one)."""


# ------------------------------------------------------------- other sections

_LISTEN_RE = re.compile(
    r"^(?:(?P<scheme>https?)://(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})/?"
    r"|unix://(?P<path>(?:\$\{XDG_RUNTIME_DIR\})?/.+))$"
)
SCOPES = ("read", "trigger", "reload", "admin")
"""What an API token may do; ``admin`` implies the others."""
Scope = Literal["read", "trigger", "reload", "admin"]
_SOCKET_MODE_RE = re.compile(r"^(?:0o?)?[0-7]{3,4}$")


def _listen_url(value: Any) -> str:
    url = to_text(value).strip()
    match = _LISTEN_RE.match(url)
    if not match or (match["port"] and not 0 <= int(match["port"]) <= 65535):
        raise PydanticCustomError(
            "listen",
            "{url} is not a listen address; use http://HOST:PORT, https://HOST:PORT, "
            "unix:///PATH or unix://${XDG_RUNTIME_DIR}/NAME",
            {"url": repr(url)},
        )
    return url


_HOST_NAME_RE = re.compile(
    r"^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$"
)


def _allowed_host(value: Any) -> str:
    """A host name or address the API may be asked for, lower case, without its port."""
    text = to_text(value).strip().lower()
    host = text
    if text.count(":") > 1 and not text.startswith("["):
        text = f"[{text}]"  # a bare IPv6 address
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        ok = bool(bracket) and (not rest or re.fullmatch(r":\d{1,5}", rest) is not None)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            ok = False
    else:
        if re.fullmatch(r"[^:]+:\d{1,5}", text):
            host = text.rsplit(":", 1)[0]
        ok = len(host) <= 253 and _HOST_NAME_RE.match(host) is not None
    if not ok:
        raise PydanticCustomError(
            "host",
            "{got} is not a host name (like cron.example.com, optionally with :PORT)",
            {"got": repr(text)},
        )
    return host.rstrip(".")


def _absolute_path(value: Any) -> str:
    path = to_text(value).strip()
    if not path.startswith("/"):
        raise PydanticCustomError(
            "path",
            "{path} is not an absolute path (it names a file on the node, not in the repository)",
            {"path": repr(path)},
        )
    return path


AbsolutePath = Annotated[str, BeforeValidator(_absolute_path)]


def _socket_mode(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if not _SOCKET_MODE_RE.match(text):
        raise PydanticCustomError(
            "socket_mode", "{got} is not an octal file mode like '0660'", {"got": repr(text)}
        )
    return text


class TokenSource(SecretSource):
    """An API token: value, else fromFile, else fromEnvVar (the first one set wins; the
    loader warns when more than one is set, as for every secret).

    A token that resolves empty (an empty file, an unset variable) rejects the
    revision: the API never falls back to answering without one."""

    value: OptText = None
    """The token itself, inline (it is in the repository: prefer fromFile or fromEnvVar)."""
    from_file: OptText = Field(None, alias="fromFile")
    """Absolute path, on the node, of a file holding the token (surrounding whitespace is
    stripped); read again on every revision and when its modification time changes."""
    from_env_var: OptText = Field(None, alias="fromEnvVar")
    """Name of an environment variable of the daemon holding the token."""

    @field_validator("from_file")
    @classmethod
    def _file(cls, value: str | None) -> str | None:
        return None if value is None else _absolute_path(value)

    @model_validator(mode="after")
    def _at_least_one(self) -> TokenSource:
        if not self.set_keys():
            raise PydanticCustomError("token_source", "give one of value, fromFile or fromEnvVar")
        return self


class ScopedToken(TokenSource):
    """A named API token allowed some scopes."""

    name: Text = Field(examples=["ci"])
    """Who holds the token; logged with every POST it makes."""
    scopes: Annotated[list[Scope], BeforeValidator(_text_list)] = Field(
        min_length=1, examples=[["read"], ["read", "trigger"]]
    )
    """What the token may do: read (status, runs, metrics), trigger (start and cancel jobs),
    reload (POST /reload), admin (GET /config, and everything else)."""


class TlsFiles(Model):
    """Certificate and key for the https:// listeners (PEM files on the node)."""

    cert: AbsolutePath
    """Absolute path of the certificate chain (PEM)."""
    key: AbsolutePath
    """Absolute path of the private key (PEM)."""


class GitHubWebhook(Model):
    """GitHub push notifications, received at POST /webhooks/github."""

    secret: SecretSource
    """The secret entered in the repository's webhook settings: requests are accepted only
    with its HMAC-SHA256 signature. A secret that resolves empty rejects the revision."""

    @model_validator(mode="after")
    def _usable(self) -> GitHubWebhook:
        if not self.secret.set_keys():
            raise PydanticCustomError("secret", "give one of value, fromFile or fromEnvVar")
        if self.secret.from_file is not None:
            _absolute_path(self.secret.from_file)
        return self


class Webhooks(Model):
    """Notifications that make the daemon look at its source now."""

    github: GitHubWebhook | None = None
    """GitHub's push webhook."""


class McpConfig(Model):
    """The Model Context Protocol endpoint: streamable HTTP at /mcp on every listener,
    behind the API's tokens and scopes."""

    enabled: Flag = False
    """Serve MCP at /mcp (needs the mcp extra: pip install 'cronstable[mcp]'; without it
    the revision is rejected)."""
    max_sessions: Int = Field(16, alias="maxSessions", ge=1, le=1024, examples=[16])
    """MCP sessions open at once; a client that would open one more gets 503 until one
    ends or idles out."""
    session_idle_timeout: Number = Field(
        300, alias="sessionIdleTimeout", gt=0, le=86400, examples=[300]
    )
    """Seconds a session may go without a request before it is closed; its client then
    starts a new one."""


WEBHOOK_MAX_BODY = 25 * 1024 * 1024
"""Default webhookMaxBodyBytes: GitHub caps its payloads at 25 MiB."""
BODY_TIMEOUT = 30.0
"""Default bodyTimeout, in seconds."""


class WebConfig(Model):
    """The HTTP API."""

    listen: Annotated[
        list[Annotated[str, BeforeValidator(_listen_url)]],
        BeforeValidator(to_list, json_schema_input_type=list[str] | None),
    ] = Field(examples=[["http://127.0.0.1:8080", "unix:///run/cronstable/api.sock"]])
    """Addresses to serve on: http://HOST:PORT, https://HOST:PORT (needs tls) or
    unix:///PATH (socketMode sets its permissions); a unix path may start with
    ${XDG_RUNTIME_DIR}, expanded on the node (<tmp>/cronstable-UID when unset)."""
    auth_token: TokenSource | None = Field(None, alias="authToken")
    """A token allowed every scope, sent as ``Authorization: Bearer TOKEN``."""
    auth_tokens: list[ScopedToken] = Field(default_factory=list, alias="authTokens")
    """Named tokens, each allowed the scopes listed beside it."""
    metrics_public: Flag = Field(False, alias="metricsPublic")
    """Serve GET /metrics to any peer without a token."""
    webhooks: Webhooks | None = None
    """Push notifications (GitHub) that make the git source fetch at once."""
    mcp: McpConfig | None = None
    """The Model Context Protocol endpoint at /mcp (off unless enabled)."""
    tls: TlsFiles | None = None
    """Certificate and key of every https:// listener."""
    socket_mode: Annotated[OptText, AfterValidator(_socket_mode)] = Field(
        None, alias="socketMode", examples=["0660"]
    )
    """Permissions of every unix:// socket, in octal (``'0660'``); default: the umask's."""
    allowed_hosts: Annotated[
        list[Annotated[str, BeforeValidator(_allowed_host)]],
        BeforeValidator(to_list, json_schema_input_type=list[str] | None),
    ] = Field(default_factory=list, alias="allowedHosts", examples=[["cron.example.com"]])
    """Host names the API is reached by besides localhost and the listen addresses (a
    :PORT is ignored). With no token configured, a request for any other name gets 421
    (this stops DNS rebinding); a browser page served under one of these names (through
    a reverse proxy) may call the API."""
    body_timeout: Number = Field(BODY_TIMEOUT, alias="bodyTimeout", gt=0, examples=[30])
    """Seconds a request's body may take to arrive, on every route; past it the answer is
    408 and the connection is closed."""
    webhook_max_body_bytes: Size = Field(
        WEBHOOK_MAX_BODY, alias="webhookMaxBodyBytes", gt=0, examples=["25M"]
    )
    """Largest body POST /webhooks/github accepts (bytes, or with K, M, G: powers of
    1024); a larger declared length gets 413 before anything is read."""
    webhook_body_budget_bytes: OptSize = Field(
        None, alias="webhookBodyBudgetBytes", gt=0, examples=["100M"]
    )
    """Bytes all webhook bodies being received at once may hold together; a request that
    does not fit gets 503 with Retry-After. Default: 4 x webhookMaxBodyBytes."""

    @property
    def webhook_budget(self) -> int:
        """webhookBodyBudgetBytes, or its default."""
        if self.webhook_body_budget_bytes is not None:
            return self.webhook_body_budget_bytes
        return 4 * self.webhook_max_body_bytes

    # connection limits: each stops one way of holding the daemon's descriptors
    max_connections: Int = Field(512, alias="maxConnections", ge=1, examples=[512])
    """Open connections per listener; one more is closed at once (a connection flood)."""
    keep_alive_timeout: Number = Field(15, alias="keepAliveTimeout", gt=0, examples=[15])
    """Seconds a connection may stay open between requests (idle connections held open)."""
    header_timeout: Number = Field(10, alias="headerTimeout", gt=0, examples=[10])
    """Seconds a request line and its headers may take from their first byte, and a TLS
    handshake from the connection (headers sent a byte at a time)."""
    fd_reserve: Int = Field(64, alias="fdReserve", ge=0, examples=[64])
    """Descriptors kept free for job spawns: below it, listeners stop accepting until
    connections close (at most half the open-files limit)."""

    @property
    def mode(self) -> int | None:
        """socketMode as a number."""
        return None if self.socket_mode is None else int(self.socket_mode.removeprefix("0o"), 8)

    @model_validator(mode="after")
    def _keys_that_apply(self) -> WebConfig:
        schemes = {url.split("://", 1)[0] for url in self.listen}
        if "https" in schemes and self.tls is None:
            raise PydanticCustomError(
                "tls", "an https:// listener needs tls: {cert: PATH, key: PATH}"
            )
        if self.tls is not None and "https" not in schemes:
            raise PydanticCustomError("tls", "tls is set but no listener is https://")
        if self.socket_mode is not None and "unix" not in schemes:
            raise PydanticCustomError("socket_mode", "socketMode is set but no listener is unix://")
        if self.webhook_budget < self.webhook_max_body_bytes:
            raise PydanticCustomError(
                "webhook_budget",
                "webhookBodyBudgetBytes ({budget}) is smaller than webhookMaxBodyBytes "
                "({limit}): no delivery of the largest size could ever be received",
                {"budget": self.webhook_budget, "limit": self.webhook_max_body_bytes},
            )
        names = [t.name for t in self.auth_tokens]
        for name in names:
            if names.count(name) > 1:
                raise PydanticCustomError(
                    "token_name", "two authTokens are named {name}", {"name": repr(name)}
                )
        return self


_YAML12_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
_YAML12_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")


def _typed_values(value: Any) -> Any:
    try:
        return _plain_values(value)
    except RecursionError:
        raise PydanticCustomError("depth", "values nest too deeply") from None


def _plain_values(value: Any) -> Any:
    """Inside free-form logging settings, numbers, booleans and null are typed as YAML 1.2 does."""
    if isinstance(value, dict):
        return {k: _plain_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_values(v) for v in value]
    if isinstance(value, str):
        if value in ("true", "True", "TRUE"):
            return True
        if value in ("false", "False", "FALSE"):
            return False
        if value in ("null", "Null", "NULL", "~"):
            return None
        if _YAML12_INT.match(value):
            return int(value)
        if _YAML12_FLOAT.match(value):
            return float(value)
    return value


FreeForm = Annotated[dict[str, Any], BeforeValidator(_typed_values)]


class LoggingConfig(Model):
    """Python's logging.config.dictConfig schema, applied when it changes."""

    version: Literal[1]
    """Always 1."""
    incremental: Flag = False
    disable_existing_loggers: Flag = True
    formatters: FreeForm = Field(default_factory=dict)
    filters: FreeForm = Field(default_factory=dict)
    handlers: FreeForm = Field(default_factory=dict)
    loggers: FreeForm = Field(default_factory=dict)
    root: FreeForm = Field(default_factory=dict)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        return 1 if value in ("1", 1) else value

    def dict_config(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_unset=True) | {"version": 1}


def _etcd_endpoint(value: Any) -> str:
    text = to_text(value).rstrip("/")
    if not re.match(r"^https?://[^/\s]+$", text):
        raise PydanticCustomError(
            "etcd_endpoint",
            "{got} is not http://HOST:PORT or https://HOST:PORT",
            {"got": repr(text)},
        )
    return text


class ClusterEtcd(Model):
    """The etcd cluster that holds the leadership (a login comes from the daemon's
    environment: CRONSTABLE_ETCD_USERNAME with CRONSTABLE_ETCD_PASSWORD or _PASSWORD_FILE)."""

    endpoints: Annotated[
        list[Annotated[str, BeforeValidator(_etcd_endpoint)]],
        BeforeValidator(to_list, json_schema_input_type=list[str] | None),
        CREDENTIAL_URL,
    ] = Field(min_length=1, examples=[["http://127.0.0.1:2379"]])
    """Client URLs of etcd, tried in order when one does not answer."""
    prefix: Text = "/cronstable/"
    """Key prefix of the leader and membership keys; one per cluster."""
    ca_file: AbsolutePath | None = Field(None, alias="caFile")
    """CA bundle (PEM) that signs etcd's certificate, for https:// endpoints."""
    cert_file: AbsolutePath | None = Field(None, alias="certFile")
    """Client certificate (PEM), when etcd requires one."""
    key_file: AbsolutePath | None = Field(None, alias="keyFile")
    """Key of the client certificate (PEM)."""

    @model_validator(mode="after")
    def _tls_keys(self) -> ClusterEtcd:
        tls = self.ca_file is not None or self.cert_file is not None
        if tls and not any(e.startswith("https://") for e in self.endpoints):
            raise PydanticCustomError("tls", "caFile/certFile are set but no endpoint is https://")
        if self.key_file is not None and self.cert_file is None:
            raise PydanticCustomError("tls", "keyFile needs certFile")
        return self


class ClusterFilesystem(Model):
    """A directory every node mounts (NFS, CephFS); host clocks must agree within 1 s."""

    path: AbsolutePath
    """Absolute path of the shared directory: point it inside the share, not at its mount
    point; while it does not exist (the share not mounted yet) the node waits for it."""


_DNS_LABEL_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def _dns_label(what: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None:
            return None  # "unset" where the field may be (the model refuses it elsewhere)
        text = to_text(value).strip()
        if not _DNS_LABEL_RE.match(text):
            raise PydanticCustomError(
                "dns_label",
                "{got} is not a Kubernetes {what} (1-63 lower-case letters, digits and '-', "
                "starting and ending with a letter or digit)",
                {"got": repr(text), "what": what},
            )
        return text

    return check


class ClusterKubernetes(Model):
    """Leases (coordination.k8s.io/v1) in one namespace of a Kubernetes cluster: the
    pod's service account (in-cluster) or a kubeconfig file gives the API server and the
    credentials.  A Lease keeps no records: durable state stays on etcd or a directory."""

    namespace: Annotated[str | None, BeforeValidator(_dns_label("namespace"))] = Field(
        None, examples=["ops"]
    )
    """Namespace of the Leases; unset: the pod's own (its service account's), else the
    kubeconfig context's, else ``default``."""
    lease_name: Annotated[str, BeforeValidator(_dns_label("Lease name"))] = Field(
        "cronstable", alias="leaseName"
    )
    """Name of the leader Lease; one per cluster.  The members' and slots' Leases are
    named after it (``<leaseName>-member-<node>``, ``<leaseName>-slot-<job>``)."""
    kubeconfig: AbsolutePath | None = None
    """Path of a kubeconfig file on the node (its current context is used); unset: the
    in-cluster service account (token and CA under
    /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT)."""


class ClusterConfig(Model):
    """Leader election among the nodes that follow this configuration."""

    backend: Literal["etcd", "filesystem", "kubernetes"]
    """Where the leadership is kept."""
    elect_leader: Flag = Field(True, alias="electLeader")
    """Elect a leader; false runs every job on every node, whatever its clusterPolicy."""
    lease_ttl: Int = Field(10, alias="leaseTtl", ge=2, le=3600)
    """Seconds a node's lease lasts without renewal: a dead leader is replaced after
    about this long."""
    distribution: Literal["single-leader", "spread"] = "single-leader"
    """single-leader: the leader runs every Leader job; spread: each Leader job runs on
    one live member, chosen by rendezvous hashing of the job name."""
    etcd: ClusterEtcd | None = None
    filesystem: ClusterFilesystem | None = None
    kubernetes: ClusterKubernetes | None = None

    @model_validator(mode="after")
    def _backend_settings(self) -> ClusterConfig:
        for name in ("etcd", "filesystem", "kubernetes"):
            given = getattr(self, name) is not None
            if name == self.backend and not given:
                raise PydanticCustomError(
                    "cluster_backend", "backend {name} needs its {name}: settings", {"name": name}
                )
            if name != self.backend and given:
                raise PydanticCustomError(
                    "cluster_backend",
                    "{name}: is set but the backend is {backend}",
                    {"name": name, "backend": self.backend},
                )
        return self


class StateConfig(Model):
    """Durable state: pending retries, last fires, running runs, @reboot markers and run
    history survive a restart of the daemon (kill -9 included)."""

    backend: Literal["etcd", "filesystem"]
    """Where the records are kept: ``filesystem`` in the node's ``--state-dir``, ``etcd``
    under the prefix of ``cluster.etcd`` (which it needs)."""
    on_store_unavailable: Literal["degrade", "fail-closed"] = Field(
        "degrade", alias="onStoreUnavailable"
    )
    """When the store cannot be written before a launch that needs a record: ``degrade``
    runs anyway as if stateless (and logs it); ``fail-closed`` skips that launch."""
    shared: Flag = False
    """``filesystem`` only: every node's ``--state-dir`` is the same directory on a share
    (beside the cluster's shared directory, not inside it), so the nodes' records meet
    there as on etcd: a ``Leader`` job's pending retry, last fire and runs going pass to
    the next leader, and the cluster-wide @reboot marker, pauses, alerts and workflow runs
    are the cluster's.  etcd is always shared."""


PER_JOB_METRICS_UP_TO = 10_000
"""Without ``metrics.perJob``, per-job metric series are kept up to this many jobs."""


def _optional_flag(value: Any) -> Any:
    return None if value is None else to_flag(value)


class MetricsConfig(Model):
    """The daemon's Prometheus metrics (``GET /metrics``)."""

    per_job: Annotated[bool | None, BeforeValidator(_optional_flag)] = Field(None, alias="perJob")
    """Keep the series labelled by job (runs, durations, CPU, memory, retries, runs going,
    last success, next fire). Unset: on up to 10,000 jobs, off above (a log line says so);
    off, the daemon-wide series stay and a scrape costs the same for any number of jobs."""


class PoolConfig(Model):
    """A pool of slots shared by the jobs that name it: at most ``slots`` of their runs
    go at once; others wait in the pool's queue, highest ``poolPriority`` first, then
    the longest waiting."""

    name: Text = Field(examples=["warehouse-db"])
    """Unique name of the pool in the whole configuration (jobs name it in ``pool``)."""
    slots: Int = Field(ge=1, examples=[4])
    """How many runs may hold a slot at once (at least 1)."""
    scope: Literal["node", "cluster"] = "node"
    """Where the cap holds: ``node``, on each node separately; ``cluster``, across every
    node of the cluster, through slots in the shared store of the ``cluster`` section."""

    @field_validator("name")
    @classmethod
    def _name_form(cls, name: str) -> str:
        if not _NAME_RE.match(name) or not name.strip():
            raise PydanticCustomError(
                "name", "a pool name must be 1-200 characters without control characters"
            )
        return name


class ConfigFile(Model):
    """One configuration file."""

    jobs: Annotated[
        list[JobConfig], BeforeValidator(to_list, json_schema_input_type=list[JobConfig] | None)
    ] = Field(default_factory=list)
    """The jobs defined in this file."""
    workflows: Annotated[
        list[WorkflowConfig],
        BeforeValidator(to_list, json_schema_input_type=list[WorkflowConfig] | None),
    ] = Field(default_factory=list)
    """The workflows defined in this file (jobs that depend on jobs)."""
    defaults: JobDefaults = _shared(JobDefaults())
    """Settings for every job and workflow task of this file (and, of them, utc, timezone,
    enabled, startingDeadlineSeconds, clusterPolicy, concurrencyPolicy, onFailure's
    reports, onSuccess and onMissed for its workflows too); included files' defaults come
    first."""
    include: Annotated[list[str] | str, BeforeValidator(_text_list)] = Field(
        default_factory=list, examples=[["_defaults.yaml"], "_defaults.yaml"]
    )
    """Files or directories loaded before this one, relative to it."""
    web: WebConfig | None = None
    logging: LoggingConfig | None = None
    cluster: ClusterConfig | None = None
    """Leader election between the daemons that follow this configuration."""
    state: StateConfig | None = None
    """Durable state kept across restarts of the daemon."""
    metrics: MetricsConfig | None = None
    """What ``GET /metrics`` serves."""
    pools: Annotated[
        list[PoolConfig], BeforeValidator(to_list, json_schema_input_type=list[PoolConfig] | None)
    ] = Field(default_factory=list)
    """Pools of slots that cap how many runs of the jobs naming them go at once; a pool
    named in any file is known to every job."""

"""Report templates: Jinja2 in a sandbox, compiled once, the same for checks and sends.

Pure and a leaf (jinja2 only): the loader compiles every template a revision
sets, so one that does not compile is a configuration error with file and line,
and the reporters render the same compiled templates.  Templates come from the
configuration repository, so they run in Jinja2's :class:`SandboxedEnvironment`
(no attribute access to internals, no unsafe calls); HTML mail bodies are
compiled with autoescape on.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when a template is first compiled: most revisions set none
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment


class TemplateError(Exception):
    """A template that does not compile; ``line`` is within the template (1-based)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        where = f" (line {self.line} of the template)" if self.line else ""
        return f"{self.message}{where}"


@functools.cache
def _environment(autoescape: bool) -> SandboxedEnvironment:
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(autoescape=autoescape, undefined=jinja2.Undefined)


@functools.lru_cache(maxsize=4096)
def compile_template(text: str, *, autoescape: bool = False) -> jinja2.Template:
    """``text`` compiled (cached by text); raises :class:`TemplateError`."""
    import jinja2

    try:
        return _environment(autoescape).from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(exc.message or "syntax error", exc.lineno) from None


def render(text: str, variables: dict[str, Any], *, autoescape: bool = False) -> str:
    """``text`` rendered with ``variables``; raises what the template raises
    (a sandbox violation, an error in a filter, ...): callers log it and fall back."""
    return compile_template(text, autoescape=autoescape).render(variables)

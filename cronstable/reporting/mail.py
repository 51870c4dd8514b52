"""Mail reports through an SMTP server (aiosmtplib), as yacron sends them.

Off until from, to and smtpHost are set.  ``tls`` connects with implicit TLS,
``starttls`` upgrades a plain connection; certificates are checked only with
``validate_certs`` (yacron's default is not to).  ``html`` sends the body as
HTML, rendered with autoescape.  A success whose body renders empty (a template
that prints nothing when all went well) is not sent.
"""

from __future__ import annotations

import logging
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from cronstable.config.models import MailReport
from cronstable.reporting.base import Message, Reporter, ReportError, resolve_secret_async

logger = logging.getLogger(__name__)


class MailReporter(Reporter):
    key = "mail"

    async def send(self, settings: Any, message: Message) -> None:
        import aiosmtplib

        mail: MailReport = settings
        body = message.render(mail.body, what="mail body", autoescape=mail.html)
        if message.success and not body.strip():
            logger.info(
                "Job %s: the success mail's body is empty; not sending it",
                message.job.name,
                extra={"job": message.job.name},
            )
            return
        subject = message.render(mail.subject, what="mail subject").strip()
        assert mail.from_ is not None and mail.to and mail.smtp_host is not None
        email = EmailMessage()
        email["From"] = mail.from_
        email["To"] = ", ".join(mail.to)
        email["Subject"] = " ".join(subject.split())
        email["Date"] = formatdate(localtime=True)
        email["Message-ID"] = make_msgid()
        email.set_content(body, subtype="html" if mail.html else "plain")
        password = await resolve_secret_async(mail.password)
        try:
            await aiosmtplib.send(
                email,
                hostname=mail.smtp_host,
                port=mail.smtp_port,
                use_tls=mail.tls,
                start_tls=True if mail.starttls else False,
                validate_certs=mail.validate_certs,
                username=mail.username,
                password=password if mail.username is not None else None,
                timeout=mail.timeout,
            )
        except aiosmtplib.SMTPException as exc:
            raise ReportError(
                f"SMTP server {mail.smtp_host}:{mail.smtp_port}: {type(exc).__name__}: {exc}"
            ) from None
        except OSError as exc:
            raise ReportError(
                f"cannot reach SMTP server {mail.smtp_host}:{mail.smtp_port}: {exc}"
            ) from None

"""The one redaction function: credentials in URL-like specs, inside any text."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronstable.redact import redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("git+https://deploy:s3cret@host/x.git", "git+https://deploy:<hidden>@host/x.git"),
        ("https://deploy:s3cret@host/x.git", "https://deploy:<hidden>@host/x.git"),
        ("etcd://root:pw@127.0.0.1:2379/cron/", "etcd://root:<hidden>@127.0.0.1:2379/cron/"),
        ("git+ssh://git:pw@host/r.git", "git+ssh://git:<hidden>@host/r.git"),
        # a password with an unencoded "@": everything up to the last "@" of the host part
        ("git+https://u:p@ss@host/x.git", "git+https://u:<hidden>@host/x.git"),
        ("git+https://u:p%40ss@host/x.git", "git+https://u:<hidden>@host/x.git"),
        # a password with an unencoded "/", "?" or "#" (no URL parser reads it as one):
        # still masked, up to the last "@" of the word
        ("git+https://u:pa/ss@host/x.git", "git+https://u:<hidden>@host/x.git"),
        ("git+https://u:pa?ss@host/x.git", "git+https://u:<hidden>@host/x.git"),
        ("git+https://u:pa#ss@host/x.git", "git+https://u:<hidden>@host/x.git"),
        ("'etcd://u:a/b#c?d@h:1/p/' failed", "'etcd://u:<hidden>@h:1/p/' failed"),
        # an "@" in a ref after a normal password does not swallow the host
        ("git+https://u:p@h/x.git?ref=a@b", "git+https://u:<hidden>@h/x.git?ref=a@b"),
        # https://TOKEN@host: the user name is the secret
        ("https://ghp_abcdef@github.com/o/r.git", "https://<hidden>@github.com/o/r.git"),
        ("git+http://tok@h/r", "git+http://<hidden>@h/r"),
        # a lone user name on other schemes is not a secret
        ("git+ssh://git@github.com/o/r.git", "git+ssh://git@github.com/o/r.git"),
        ("git://host/r.git", "git://host/r.git"),
        # inside text, quoted, twice
        (
            "unknown scheme 'https' in 'https://a:b@h/x' and \"git+https://c:d@i/y\"",
            "unknown scheme 'https' in 'https://a:<hidden>@h/x' and \"git+https://c:<hidden>@i/y\"",
        ),
        # query parameters that hold a secret; others stay
        (
            "git+https://h/x.git?ref=main&token=abc&interval=5",
            "git+https://h/x.git?ref=main&token=<hidden>&interval=5",
        ),
        ("https://h/x?access_token=abc", "https://h/x?access_token=<hidden>"),
        ("https://h/x?Password=abc;a=1", "https://h/x?Password=<hidden>;a=1"),
        ("https://h/x?client_secret=abc#frag", "https://h/x?client_secret=<hidden>#frag"),
        ("https://h/x?X-Amz-Signature=abc", "https://h/x?X-Amz-Signature=<hidden>"),
        ("https://h/x?auth=abc&author=bob", "https://h/x?auth=<hidden>&author=bob"),
        (
            "etcds://h:1/p/?ca=/etc/ca.pem&key=/etc/k.pem",
            "etcds://h:1/p/?ca=/etc/ca.pem&key=/etc/k.pem",
        ),
        # nothing to mask
        ("/etc/cronstable.d", "/etc/cronstable.d"),
        ("mail me at ops@example.com", "mail me at ops@example.com"),
        ("git:.@origin/main", "git:.@origin/main"),
        ("https://h/x?email=a@b", "https://h/x?email=a@b"),
        ("https://u:@h/x", "https://u:@h/x"),
    ],
)
def test_redact_table(text: str, expected: str) -> None:
    assert redact(text) == expected


SAFE = string.ascii_letters + string.digits + "-._~!$&'()*+,;=%"
SCHEMES = ["git+https", "git+http", "https", "http", "git+ssh", "ssh", "git", "etcd", "etcds"]


@given(
    scheme=st.sampled_from(SCHEMES),
    user=st.text(string.ascii_letters + string.digits + "-._", min_size=1, max_size=12),
    password=st.text(SAFE.replace("'", "") + "@:", min_size=1, max_size=24),
    host=st.from_regex(r"[a-z0-9.-]{1,20}(:[0-9]{1,5})?", fullmatch=True),
    path=st.from_regex(r"(/[A-Za-z0-9._-]{0,10}){1,3}", fullmatch=True),
    prefix=st.text(string.ascii_letters + " .,:'\"", max_size=20),
    suffix=st.text(string.ascii_letters + string.digits + " .,:'\"", max_size=20),
)
def test_a_password_in_a_url_inside_any_text_is_masked(
    scheme: str, user: str, password: str, host: str, path: str, prefix: str, suffix: str
) -> None:
    text = f"{prefix}{scheme}://{user}:{password}@{host}{path}{suffix}"
    assert redact(text) == f"{prefix}{scheme}://{user}:<hidden>@{host}{path}{suffix}"


@given(st.text(string.printable, max_size=80))
def test_redact_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@given(
    scheme=st.sampled_from(SCHEMES),
    user=st.text(string.ascii_letters + string.digits + "-._", min_size=1, max_size=12),
    head=st.text(SAFE.replace("'", "") + ":/?#", max_size=12),  # an "@" first: see below
    odd=st.sampled_from("/?#"),
    tail=st.text(SAFE.replace("'", "") + "@:/?#", max_size=12),
    host=st.from_regex(r"[a-z0-9.-]{1,20}(:[0-9]{1,5})?", fullmatch=True),
    path=st.from_regex(r"(/[A-Za-z0-9._-]{0,10}){1,3}", fullmatch=True),
)
def test_a_password_with_an_unencoded_slash_question_mark_or_hash_is_masked(
    scheme: str, user: str, head: str, odd: str, tail: str, host: str, path: str
) -> None:
    # (USER:PA@SS/WORD@HOST reads as a password PA then a host SS: an "@" before the
    # first "/", "?" or "#" is the end of the userinfo, as for "ref=a@b" after a host)
    password = head + odd + tail
    text = f"{scheme}://{user}:{password}@{host}{path}"
    assert redact(text) == f"{scheme}://{user}:<hidden>@{host}{path}"


# ------------------------------------------------------------ strict: configuration text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the whole userinfo, every query value, whatever the scheme or the name
        ("http://u:PW@host/h?token=T&x=Y", "http://<hidden>@host/h?token=<hidden>&x=<hidden>"),
        ("https://KEY@o1.ingest.sentry.io/1", "https://<hidden>@o1.ingest.sentry.io/1"),
        ("git+ssh://git@h/r.git?ref=main", "git+ssh://<hidden>@h/r.git?ref=<hidden>"),
        ("'https://h:1/x?key=abc' is not", "'https://h:1/x?key=<hidden>' is not"),
        # a parameter without "=" is a value too; the fragment stays
        ("https://h/x?SECRET;a=1#top", "https://h/x?<hidden>;a=<hidden>#top"),
        # an unencoded "/" in a password: the userinfo runs to the last "@"
        ("http://u:pa/ss@h/x", "http://<hidden>@h/x"),
        # what a lenient pass left is finished
        (
            "http://u:<hidden>@h/x?token=<hidden>&x=Y",
            "http://<hidden>@h/x?token=<hidden>&x=<hidden>",
        ),
        # no credentials: unchanged
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("unix:///run/cronstable/api.sock", "unix:///run/cronstable/api.sock"),
        ("a=1;b=2 and KEY=VALUE", "a=1;b=2 and KEY=VALUE"),
    ],
)
def test_strict_masks_every_userinfo_and_query_value(text: str, expected: str) -> None:
    assert redact(text, strict=True) == expected


def test_known_secrets_are_masked_as_written_and_as_quoted() -> None:
    assert redact("expected a mapping, got 'pw'", ["pw"]) == "expected a mapping, got <hidden>"
    assert redact("the token is s3cr3t!", ["s3cr3t!"]) == "the token is <hidden>"
    # repr doubles a backslash and switches quotes: both forms are found
    assert redact(r"got 'a\\b'", ["a\\b"]) == "got <hidden>"
    assert redact('got "it\'s"', ["it's"]) == "got <hidden>"
    # the longest first: a secret holding another is masked whole
    assert redact("xx-long-secret-xx", ["long", "long-secret"]) == "xx-<hidden>-xx"
    # a secret inside a mask is not masked again; empty secrets mean nothing
    assert redact("<hidden> hid", ["hid", ""]) == "<hidden> <hidden>"


def test_a_mask_function_gives_each_secret_its_own_replacement() -> None:
    digest = "sha256:" + "0" * 64
    shown = redact("http://u:PW@host/h?token=T", strict=True, mask=lambda s: f"[{s}]")
    assert shown == "http://[u:PW]@host/h?token=[T]"
    # digests are masks already: redacting again changes nothing
    again = f"http://{digest}@host/h?token={digest}"
    assert redact(again, strict=True, mask=lambda s: "X") == again


@given(st.text(string.printable, max_size=80), st.lists(st.text(string.printable, max_size=6)))
def test_strict_redact_with_secrets_is_idempotent(text: str, secrets: list[str]) -> None:
    once = redact(text, secrets, strict=True)
    assert redact(once, secrets, strict=True) == once


@given(
    user=st.text(string.ascii_letters + string.digits + "-._", min_size=1, max_size=12),
    password=st.text(SAFE.replace("'", "").replace("&", "") + "@:", min_size=1, max_size=24),
    host=st.from_regex(r"[a-z0-9.-]{1,20}(:[0-9]{1,5})?", fullmatch=True),
    name=st.from_regex(r"[A-Za-z_]{1,8}", fullmatch=True),
    value=st.text(string.ascii_letters + string.digits + "-._~%", min_size=1, max_size=16),
)
def test_strict_leaves_no_userinfo_or_query_value(
    user: str, password: str, host: str, name: str, value: str
) -> None:
    text = f"got 'https://{user}:{password}@{host}/p?{name}={value}' there"
    assert redact(text, strict=True) == f"got 'https://<hidden>@{host}/p?{name}=<hidden>' there"

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
        ("git+https://deploy:s3cret@host/x.git", "git+https://deploy:***@host/x.git"),
        ("https://deploy:s3cret@host/x.git", "https://deploy:***@host/x.git"),
        ("etcd://root:pw@127.0.0.1:2379/cron/", "etcd://root:***@127.0.0.1:2379/cron/"),
        ("git+ssh://git:pw@host/r.git", "git+ssh://git:***@host/r.git"),
        # a password with an unencoded "@": everything up to the last "@" of the host part
        ("git+https://u:p@ss@host/x.git", "git+https://u:***@host/x.git"),
        ("git+https://u:p%40ss@host/x.git", "git+https://u:***@host/x.git"),
        # a password with an unencoded "/", "?" or "#" (no URL parser reads it as one):
        # still masked, up to the last "@" of the word
        ("git+https://u:pa/ss@host/x.git", "git+https://u:***@host/x.git"),
        ("git+https://u:pa?ss@host/x.git", "git+https://u:***@host/x.git"),
        ("git+https://u:pa#ss@host/x.git", "git+https://u:***@host/x.git"),
        ("'etcd://u:a/b#c?d@h:1/p/' failed", "'etcd://u:***@h:1/p/' failed"),
        # an "@" in a ref after a normal password does not swallow the host
        ("git+https://u:p@h/x.git?ref=a@b", "git+https://u:***@h/x.git?ref=a@b"),
        # https://TOKEN@host: the user name is the secret
        ("https://ghp_abcdef@github.com/o/r.git", "https://***@github.com/o/r.git"),
        ("git+http://tok@h/r", "git+http://***@h/r"),
        # a lone user name on other schemes is not a secret
        ("git+ssh://git@github.com/o/r.git", "git+ssh://git@github.com/o/r.git"),
        ("git://host/r.git", "git://host/r.git"),
        # inside text, quoted, twice
        (
            "unknown scheme 'https' in 'https://a:b@h/x' and \"git+https://c:d@i/y\"",
            "unknown scheme 'https' in 'https://a:***@h/x' and \"git+https://c:***@i/y\"",
        ),
        # query parameters that hold a secret; others stay
        (
            "git+https://h/x.git?ref=main&token=abc&interval=5",
            "git+https://h/x.git?ref=main&token=***&interval=5",
        ),
        ("https://h/x?access_token=abc", "https://h/x?access_token=***"),
        ("https://h/x?Password=abc;a=1", "https://h/x?Password=***;a=1"),
        ("https://h/x?client_secret=abc#frag", "https://h/x?client_secret=***#frag"),
        ("https://h/x?X-Amz-Signature=abc", "https://h/x?X-Amz-Signature=***"),
        ("https://h/x?auth=abc&author=bob", "https://h/x?auth=***&author=bob"),
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
    assert redact(text) == f"{prefix}{scheme}://{user}:***@{host}{path}{suffix}"


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
    assert redact(text) == f"{scheme}://{user}:***@{host}{path}"

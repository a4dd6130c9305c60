"""Which origins may call a node (stategate/origins.py): listed ones, and its own, which is
the Host a request was sent to with http or https, default ports included."""

from __future__ import annotations

import pytest

from stategate.origins import listed, own


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1:8101", "127.0.0.1:8101"),
        ("https://127.0.0.1:8101", "127.0.0.1:8101"),  # TLS ended by a proxy in front
        ("http://gw.example", "gw.example"),
        ("http://gw.example", "gw.example:80"),
        ("https://gw.example", "gw.example:443"),
        ("http://gw.example:80", "GW.example"),
        ("http://[::1]:8101", "[::1]:8101"),
    ],
)
def test_the_host_a_request_was_sent_to_is_its_own_origin(origin: str, host: str) -> None:
    assert own(origin, host)


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1:8102", "127.0.0.1:8101"),  # another port: another origin
        ("http://127.0.0.1", "127.0.0.1:8101"),
        ("https://gw.example", "gw.example:80"),
        ("http://evil.example", "gw.example"),
        ("http://gw.example.evil.example", "gw.example"),
        ("ws://127.0.0.1:8101", "127.0.0.1:8101"),  # not a page's scheme
        ("file://", "127.0.0.1:8101"),
        ("null", "127.0.0.1:8101"),
        ("", "127.0.0.1:8101"),
        ("http://127.0.0.1:8101/", "127.0.0.1:8101"),  # not an origin: a path
        ("http://x@127.0.0.1:8101", "127.0.0.1:8101"),
        ("http://127.0.0.1:8101", None),
        ("http://127.0.0.1:port", "127.0.0.1:port"),
        ("http://[::1", "[::1"),
    ],
)
def test_anything_else_is_not(origin: str, host: str | None) -> None:
    assert not own(origin, host)


def test_listed_origins_are_matched_exactly_and_a_star_lists_every_one() -> None:
    origins = ("https://dash.example.com",)
    assert listed("https://dash.example.com", origins)
    assert not listed("https://dash.example.com:443", origins)
    assert not listed("http://dash.example.com", origins)
    assert not listed("https://dash.example.com", ())
    assert listed("null", ("*",)) and listed("http://evil.example", ("*",))

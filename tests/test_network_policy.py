"""The network policy every outgoing platform request obeys (``echo_builder.network``), checked piece by piece:
address checks (with the legacy IPv4 spellings the system resolver accepts), the policy a ``--base-url`` makes,
the guarded ``requests`` session and ``httpx`` transport against real loopback servers (redirect hops checked and
bounded, a total deadline a slow drip cannot stretch), rate-limit header sanitizing, and the collector's bounded
waits. The platform clients over these pieces are exercised by the hostile corpus
(``tests/data/hostile/cases.d/collection.yaml``)."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from echo_builder.collect.core import DEFAULT_RATE_LIMIT_WAIT_S, MAX_RATE_LIMIT_WAIT_S, bounded_wait
from echo_builder.errors import ConfigError
from echo_builder.network.deadline import DeadlineExceeded
from echo_builder.network.guard import checked_addresses
from echo_builder.network.guarded_requests import guarded_session
from echo_builder.network.headers import MAX_RESET_S, register_issued_credentials, sanitize_rate_limit_headers
from echo_builder.network.policy import NetworkPolicy, RefusedDestination
from echo_builder.secrets import redact


class _Server:
    """A loopback HTTP server answering every GET and POST with ``answer(path) -> (status, headers, body,
    drip_s)``."""

    def __init__(self, answer) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                status, headers, body, drip_s = answer(self.path)
                self.send_response(status)
                for key, value in {**headers, "content-length": str(len(body))}.items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    if not drip_s:
                        self.wfile.write(body)
                        return
                    for i in range(len(body)):
                        if outer.stop.wait(drip_s):
                            return
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                except OSError:  # the client gave up (its deadline)
                    pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.stop = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def decoy() -> Iterator[_Server]:
    with _Server(lambda path: (200, {}, b"stolen", 0)) as server:
        yield server


# -- addresses -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "2852039166",  # decimal
        "0xa9fea9fe",  # hexadecimal
        "0251.0376.0251.0376",  # octal parts
        "169.254.43518",  # two-part
        "::ffff:169.254.169.254",  # IPv4-mapped IPv6
        "fe80::1",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_metadata_link_local_and_this_host_are_refused_in_every_spelling_even_when_allowed(host):
    allowing = NetworkPolicy.from_entries(["0.0.0.0/0", "::/0"])
    with pytest.raises(RefusedDestination, match="never fetched"):
        checked_addresses(allowing, host, 80)


def test_loopback_is_refused_unless_the_user_named_that_host_and_port():
    with pytest.raises(RefusedDestination, match=r"non-public address 127\.0\.0\.1"):
        checked_addresses(NetworkPolicy(), "127.0.0.1", 8000)
    mine = NetworkPolicy.for_endpoints(["http://127.0.0.1:8000/api", None])
    assert checked_addresses(mine, "127.0.0.1", 8000) == [ipaddress.ip_address("127.0.0.1")]
    with pytest.raises(RefusedDestination):
        checked_addresses(mine, "127.0.0.1", 8001)  # another port of the same host
    with pytest.raises(RefusedDestination):
        checked_addresses(mine, "10.0.0.5", 8000)
    assert checked_addresses(mine, "93.184.216.34", 443) == [ipaddress.ip_address("93.184.216.34")]  # public


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://169.254.169.254/", "never"),
        ("ftp://example.com/", "http:// or https://"),
        ("http:///x", "host"),
    ],
)
def test_a_base_url_that_cannot_be_a_policy_is_a_config_error(url, message):
    with pytest.raises(ConfigError, match=message):
        NetworkPolicy.for_endpoints([url])


# -- the guarded requests session (tweepy's and prawcore's transport) ---------------------------------------------
def test_a_redirect_to_another_port_is_refused_before_connecting(decoy):
    with _Server(lambda path: (302, {"location": f"{decoy.url}/steal"}, b"", 0)) as server:
        session = guarded_session(NetworkPolicy.for_endpoints([server.url]), deadline_s=10)
        with pytest.raises(RefusedDestination, match=f"127.0.0.1:{decoy.port} refused"):
            session.get(f"{server.url}/start")
    assert decoy.paths == []


def test_a_redirect_to_the_metadata_address_is_refused(decoy):
    with _Server(
        lambda path: (302, {"location": "http://169.254.169.254/latest/meta-data/"}, b"", 0)
    ) as server:
        session = guarded_session(NetworkPolicy.for_endpoints([server.url]), deadline_s=10)
        with pytest.raises(RefusedDestination, match="cloud metadata"):
            session.get(f"{server.url}/start")
        assert server.paths == ["/start"]


def test_a_redirect_loop_stops_after_five_hops():
    with _Server(lambda path: (302, {"location": path}, b"", 0)) as server:
        session = guarded_session(NetworkPolicy.for_endpoints([server.url]), deadline_s=10)
        with pytest.raises(requests.TooManyRedirects):
            session.get(f"{server.url}/loop")
        assert len(server.paths) == 6  # the request and 5 redirects


def test_a_slow_drip_ends_at_the_total_deadline_not_at_the_read_timeout():
    body = b"{" + b" " * 999
    with _Server(lambda path: (200, {"content-type": "application/json"}, body, 0.2)) as server:
        session = guarded_session(NetworkPolicy.for_endpoints([server.url]), deadline_s=1.0)
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            session.get(f"{server.url}/drip", timeout=30)  # each byte is well inside the 30 s read timeout
        # the whole body would take 200 s; the deadline cut it (generous bound: no timing-sensitive check)
        assert time.monotonic() - started < 60


def test_the_session_ignores_proxy_settings_of_the_environment(monkeypatch, decoy):
    monkeypatch.setenv("HTTP_PROXY", decoy.url)
    monkeypatch.setenv("http_proxy", decoy.url)
    with _Server(lambda path: (200, {}, b"ok", 0)) as server:
        session = guarded_session(NetworkPolicy.for_endpoints([server.url]), deadline_s=10)
        assert session.get(f"{server.url}/x").content == b"ok"
    assert decoy.paths == []


def test_rate_limit_headers_reach_the_client_library_sanitized():
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-used": "nan", "x-ratelimit-reset": "1e18"}
    with _Server(lambda path: (200, headers, b"{}", 0)) as server:
        session = guarded_session(NetworkPolicy.for_endpoints([server.url]), deadline_s=10)
        answer = session.get(f"{server.url}/x")
    assert "x-ratelimit-reset" not in answer.headers and "x-ratelimit-remaining" not in answer.headers


# -- the guarded httpx transport (atproto's) --------------------------------------------------------------------
def test_the_atproto_transport_refuses_a_redirect_to_another_port(decoy):
    import httpx

    from echo_builder.network.guarded_httpx import GuardedTransport

    with _Server(lambda path: (302, {"location": f"{decoy.url}/steal"}, b"", 0)) as server:
        policy = NetworkPolicy.for_endpoints([server.url])
        client = httpx.Client(transport=GuardedTransport(policy), follow_redirects=True)
        with client, pytest.raises(RefusedDestination):
            client.get(f"{server.url}/xrpc/app.bsky.feed.searchPosts")
    assert decoy.paths == []


# -- header values ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        ({"x-rate-limit-limit": "450", "x-rate-limit-remaining": "0", "x-rate-limit-reset": "1700000000"}, 3),
        ({"x-rate-limit-limit": "450", "x-rate-limit-remaining": "0", "x-rate-limit-reset": "1e18"}, 0),
        ({"ratelimit-limit": "3000", "ratelimit-remaining": "0", "ratelimit-reset": "nan"}, 0),
        ({"ratelimit-limit": "3000", "ratelimit-remaining": "-5", "ratelimit-reset": "1700000000"}, 0),
        ({"x-ratelimit-remaining": "99.0", "x-ratelimit-used": "1", "x-ratelimit-reset": "300"}, 3),
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "300"}, 0),  # prawcore needs all three
        ({"retry-after": "120"}, 1),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 1),
        ({"retry-after": "tomorrow"}, 0),
        ({"retry-after": "999999999999999999999"}, 0),
        ({"retry-after": "inf"}, 0),
    ],
)
def test_rate_limit_headers_are_kept_only_when_every_reader_can_use_them(headers, kept):
    from requests.structures import CaseInsensitiveDict

    sane = CaseInsensitiveDict(headers)
    sanitize_rate_limit_headers(sane)
    assert len(sane) == kept
    assert all(sane[name] == headers[name] for name in sane)


def test_reddit_reset_is_capped_for_prawcores_own_sleep():
    from requests.structures import CaseInsensitiveDict

    headers = CaseInsensitiveDict(
        {"x-ratelimit-remaining": "0", "x-ratelimit-used": "100", "x-ratelimit-reset": "86400"}
    )
    assert sanitize_rate_limit_headers(headers) == [f"x-ratelimit-reset: capped at {MAX_RESET_S} s"]
    assert headers["x-ratelimit-reset"] == str(MAX_RESET_S)


@pytest.mark.parametrize(
    ("value", "wait"),
    [
        (30, 30.0),
        ("30", 30.0),
        (1e18, MAX_RATE_LIMIT_WAIT_S),
        ("999999999999999999999", MAX_RATE_LIMIT_WAIT_S),
        (float("inf"), DEFAULT_RATE_LIMIT_WAIT_S),
        ("nan", DEFAULT_RATE_LIMIT_WAIT_S),
        ("tomorrow", DEFAULT_RATE_LIMIT_WAIT_S),
        (None, DEFAULT_RATE_LIMIT_WAIT_S),
        (-5, 0.0),
    ],
)
def test_rate_limit_waits_are_bounded(value, wait):
    assert bounded_wait(value) == wait
    assert (MAX_RATE_LIMIT_WAIT_S, DEFAULT_RATE_LIMIT_WAIT_S) == (3600.0, 60.0)  # as docs/collect.md states


def test_credentials_a_server_issues_are_redacted_from_then_on():
    token = "issued-access-token-7f3a9c"
    assert redact(f"page with {token}") == f"page with {token}"
    register_issued_credentials(b'{"access_token": "issued-access-token-7f3a9c", "token_type": "bearer"}')
    assert redact(f"page with {token}") == "page with ***"
    register_issued_credentials(b"[" * 100_000)  # not JSON a sign-in answer: ignored, no RecursionError


# -- the judge and generator endpoints (the openai client) --------------------------------------------------------
def _chat(base_url: str) -> Exception:
    import asyncio

    from echo_builder.backends.openai_backend import OpenAIConnection, translate_openai_error

    connection = OpenAIConnection("openai:judge", base_url=base_url, api_key=None, timeout_s=10)

    async def call() -> None:
        try:
            await connection.client().chat.completions.create(
                model="judge", messages=[{"role": "user", "content": "hi"}]
            )
        finally:
            await connection.aclose()

    try:
        asyncio.run(call())
    except Exception as exc:
        return translate_openai_error(exc, "openai:judge")
    raise AssertionError("the call went through")


@pytest.mark.parametrize("target", ["metadata", "decoy"])
def test_a_judge_endpoint_redirecting_elsewhere_is_refused_and_not_retried(decoy, target):
    from echo_builder.errors import PermanentBackendError

    location = "http://169.254.169.254/latest/meta-data/" if target == "metadata" else f"{decoy.url}/v1/steal"
    with _Server(lambda path: (307, {"location": location}, b"", 0)) as server:
        error = _chat(f"{server.url}/v1")
        assert server.paths == ["/v1/chat/completions"]
    assert isinstance(error, PermanentBackendError), repr(error)
    assert "refused" in str(error) and "nothing was sent there" in str(error)
    assert decoy.paths == []


def test_a_judge_endpoint_redirect_loop_stops_after_five_hops():
    with _Server(lambda path: (307, {"location": path}, b"", 0)) as server:
        error = _chat(f"{server.url}/v1")
        assert len(server.paths) == 6
    assert "redirect" in str(error).lower()

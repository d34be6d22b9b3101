"""Proxies from the environment: HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY read as urllib
and requests read them (checked against both), https tunnelled with CONNECT and http sent in
absolute form through a real proxy (tests/plugins/proxy.py) in front of the session's nginx
(behind a TLS front for https), credentials from the proxy URL, and typed errors naming the
variable when the proxy refuses or cannot be reached."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from episodestream import EpisodeStreamDataset, ProxyError, StorageError
from episodestream.storage import HttpRangeReader, ReadRequest, RetryPolicy
from episodestream.storage.http._proxy import (
    Proxy,
    bypasses_proxy,
    environment_proxies,
    parse_proxy,
    proxy_for,
)
from tests.integration.test_datasets_reference import assert_matches_reference
from tests.plugins.datasets import LeRobotReference
from tests.plugins.proxy import ConnectProxy

QUICK_RETRY = RetryPolicy(max_attempts=3, backoff_initial_seconds=0.01, backoff_max_seconds=0.02)
VIDEO = "videos/observation.images.cam_high/chunk-000/file-000.mp4"
PROXY_NAMES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "REQUEST_METHOD")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable from the machine running the tests."""
    for name in PROXY_NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


# ------------------------------------------------------------------------ pure: the rules


def test_lowercase_wins_and_an_empty_lowercase_unsets(clean_env):
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}
    assert environment_proxies(env)["https"] == ("http://lower:2", "https_proxy")
    env = {"HTTP_PROXY": "http://upper:1", "http_proxy": ""}
    assert "http" not in environment_proxies(env)
    # the same answers as urllib's own reading of os.environ
    for name, value in {"HTTPS_PROXY": "http://u:1", "https_proxy": "http://l:2"}.items():
        clean_env.setenv(name, value)
    ours = {scheme: value for scheme, (value, _) in environment_proxies().items()}
    assert ours == urllib.request.getproxies_environment()


def test_cgi_ignores_upper_case_http_proxy(clean_env):
    env = {"REQUEST_METHOD": "GET", "HTTP_PROXY": "http://client-chosen:1"}
    assert proxy_for("http://origin/x", env) is None
    env["http_proxy"] = "http://admin:3128"
    proxy = proxy_for("http://origin/x", env)
    assert proxy is not None and proxy.host == "admin"


def test_scheme_then_all_proxy():
    env = {"HTTP_PROXY": "http://p-http:1", "ALL_PROXY": "http://p-all:2"}
    http, https = proxy_for("http://origin/", env), proxy_for("https://origin/", env)
    assert http is not None and (http.host, http.variable) == ("p-http", "HTTP_PROXY")
    assert https is not None and (https.host, https.variable) == ("p-all", "ALL_PROXY")
    assert proxy_for("https://origin/", {"HTTP_PROXY": "http://p:1"}) is None


def test_proxy_url_forms_and_credentials():
    bare = parse_proxy("proxy.corp:3128", "HTTPS_PROXY")
    assert (bare.host, bare.port, bare.authorization()) == ("proxy.corp", 3128, None)
    assert parse_proxy("http://proxy.corp", "HTTP_PROXY").port == 80
    secret = parse_proxy("http://al%40ice:p%3Ass%20w@proxy:8080/", "HTTPS_PROXY")
    assert (secret.username, secret.password) == ("al@ice", "p:ss w")
    assert secret.authorization() == "Basic YWxAaWNlOnA6c3Mgdw=="  # base64 of al@ice:p:ss w
    for shown in (repr(secret), secret.label):
        assert "p:ss" not in shown and "al@ice" not in shown
    assert secret.label == "http://proxy:8080 (from HTTPS_PROXY)"


@pytest.mark.parametrize(
    ("value", "why"),
    [("socks5://u:pw@proxy:1080", "only http://"), ("https://u:pw@proxy:443", "TLS to the proxy")],
)
def test_unsupported_proxy_kinds_name_the_variable(value, why):
    with pytest.raises(ProxyError) as error:
        proxy_for("https://origin/x", {"https_proxy": value})
    assert "https_proxy" in str(error.value) and why in str(error.value)
    assert "pw" not in str(error.value)


# (host, port, NO_PROXY, bypassed); the last column says where requests answers otherwise
NO_PROXY_CASES = [
    ("example.com", 443, "example.com", True, None),
    ("cdn.example.com", 443, "example.com", True, None),
    ("cdn.example.com", 443, ".example.com", True, None),
    ("notexample.com", 443, "example.com", False, None),
    ("example.com.evil", 443, "example.com", False, None),
    ("example.com", 443, "other.org, example.com ", True, None),
    ("EXAMPLE.com", 443, "Example.COM", True, None),
    ("example.com", 8443, "example.com:8443", True, None),
    ("example.com", 8443, "example.com:9000", False, None),
    ("a.example.com", 8443, "example.com:8443", True, None),
    ("example.com", 443, "example.com:443", True, "a default port is compared"),
    ("anything.org", 443, "*", True, None),
    ("10.1.2.3", 443, "10.0.0.0/8", True, None),
    ("11.1.2.3", 443, "10.0.0.0/8", False, None),
    ("192.168.1.5", 443, "192.168.1.5", True, None),
    ("127.0.0.1", 443, "localhost", False, None),
    ("localhost", 443, "127.0.0.1", False, None),
    ("::1", 443, "::1/128", True, "IPv6 CIDR"),
    ("example.com", 443, "", False, None),
    ("example.com", 443, ",,", False, None),
]


@pytest.mark.parametrize(("host", "port", "no_proxy", "bypassed", "differs"), NO_PROXY_CASES)
def test_no_proxy_matching(clean_env, host, port, no_proxy, bypassed, differs):
    assert bypasses_proxy(host.lower(), port, no_proxy) is bypassed
    import requests.utils as requests_utils

    shown_port = "" if port == 443 else f":{port}"
    url_host = f"[{host}]" if ":" in host else host
    url = f"https://{url_host}{shown_port}/x"
    theirs = requests_utils.should_bypass_proxies(url, no_proxy=no_proxy)
    if differs is None:
        assert theirs is bypassed, f"requests says {theirs}"
    else:
        assert theirs is not bypassed  # documented in _proxy.py


def test_no_proxy_exempts_a_url(clean_env):
    env = {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "internal.corp,10.0.0.0/8"}
    assert proxy_for("https://data.internal.corp/x", env) is None
    assert proxy_for("https://10.2.3.4/x", env) is None
    proxy = proxy_for("https://huggingface.co/x", env)
    assert proxy == Proxy("proxy", 3128, "HTTPS_PROXY")


# ------------------------------------------------------------- through a real proxy


def _ranges(size: int) -> list[tuple[int, int]]:
    return [(0, 100), (size // 3, 70_000), (size - 17, 17)]


def test_https_goes_through_a_connect_tunnel(
    clean_env, tls_front, connect_proxy, lerobot_sim5_url, lerobot_fixture_root
):
    data = (lerobot_fixture_root / VIDEO).read_bytes()
    clean_env.setenv("HTTPS_PROXY", connect_proxy.url)
    url = tls_front.rebase_url(lerobot_sim5_url)
    with HttpRangeReader(url, verify=str(tls_front.cert)) as reader:
        requests = [ReadRequest(VIDEO, o, n) for o, n in _ranges(len(data))]
        assert reader.read_many(requests) == [data[r.offset : r.end] for r in requests]
        connections = reader.metrics()["connections"]
    records = connect_proxy.records
    assert records and all(r.method == "CONNECT" for r in records)
    assert {r.target for r in records} == {f"localhost:{tls_front.port}"}
    assert {r.status for r in records} == {200}
    assert len(records) == connections  # every connection went through the proxy
    assert sum(r.tunnelled_bytes for r in records) > sum(n for _, n in _ranges(len(data)))


def test_http_is_sent_to_the_proxy_in_absolute_form(
    clean_env, connect_proxy, http_server, lerobot_sim5_url, lerobot_fixture_root
):
    data = (lerobot_fixture_root / VIDEO).read_bytes()
    clean_env.setenv("http_proxy", connect_proxy.url)
    clean_env.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # not for http URLs
    with HttpRangeReader(lerobot_sim5_url) as reader:
        for offset, length in _ranges(len(data)):
            assert reader.read(VIDEO, offset, length) == data[offset : offset + length]
    records = connect_proxy.records
    origin = f"http://{http_server.host}:{http_server.port}"
    assert [r.method for r in records] == ["GET"] * len(records) and len(records) >= 3
    assert all(r.target.startswith(f"{origin}/lerobot_sim5/videos/") for r in records)
    assert all(r.headers["host"] == f"{http_server.host}:{http_server.port}" for r in records)
    assert {r.status for r in records} == {206}


@pytest.mark.parametrize("no_proxy", ["localhost", ".localhost", "*", "localhost:0"])
def test_no_proxy_goes_direct(
    clean_env, tls_front, connect_proxy, lerobot_sim5_url, lerobot_fixture_root, no_proxy
):
    data = (lerobot_fixture_root / VIDEO).read_bytes()
    clean_env.setenv("HTTPS_PROXY", connect_proxy.url)
    no_proxy = no_proxy.replace(":0", f":{tls_front.port}")
    clean_env.setenv("NO_PROXY", no_proxy)
    with HttpRangeReader(tls_front.rebase_url(lerobot_sim5_url), verify=str(tls_front.cert)) as r:
        assert r.read(VIDEO, 1000, 5000) == data[1000:6000]
    assert connect_proxy.records == []


def test_proxy_credentials_from_the_url(
    clean_env, tls_front, lerobot_sim5_url, lerobot_fixture_root
):
    data = (lerobot_fixture_root / VIDEO).read_bytes()
    password = "pr0xy-s3cret:pass"
    url = tls_front.rebase_url(lerobot_sim5_url)
    with ConnectProxy(credentials=("trainer", password)) as connect_proxy:
        host_port = connect_proxy.url.removeprefix("http://")
        clean_env.setenv("HTTPS_PROXY", f"http://trainer:pr0xy-s3cret%3Apass@{host_port}")
        with HttpRangeReader(url, verify=str(tls_front.cert)) as reader:
            assert reader.read(VIDEO, 10, 1000) == data[10:1010]
        assert {r.status for r in connect_proxy.records} == {200}
        assert all(
            r.headers["proxy-authorization"].startswith("Basic ") for r in connect_proxy.records
        )


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_refusing_proxy_is_a_proxy_error_naming_the_variable(
    clean_env, tls_front, lerobot_sim5_url, scheme
):
    password = "wr0ng-pr0xy-pass"
    variable = "HTTPS_PROXY" if scheme == "https" else "http_proxy"
    url = tls_front.rebase_url(lerobot_sim5_url) if scheme == "https" else lerobot_sim5_url
    with ConnectProxy(credentials=("trainer", "right")) as connect_proxy:
        host_port = connect_proxy.url.removeprefix("http://")
        for with_credentials in (True, False):
            userinfo = f"trainer:{password}@" if with_credentials else ""
            clean_env.setenv(variable, f"http://{userinfo}{host_port}")
            with (
                HttpRangeReader(url, verify=str(tls_front.cert), retry=QUICK_RETRY) as reader,
                pytest.raises(ProxyError) as error,
            ):
                reader.read(VIDEO, 0, 10)
            text = str(error.value)
            assert variable in text and "407" in text and host_port in text
            assert ("credentials were refused" in text) is with_credentials
            assert password not in text and password not in repr(error.value)
            assert reader.metrics()["retries"] == 0  # a refusal does not pass by itself
        assert {r.status for r in connect_proxy.records} == {407}


def test_an_unreachable_proxy_is_a_proxy_error_naming_the_variable(clean_env, lerobot_sim5_url):
    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    clean_env.setenv("http_proxy", f"http://user:hidden-pass@127.0.0.1:{port}")
    with (
        HttpRangeReader(lerobot_sim5_url, retry=QUICK_RETRY) as reader,
        pytest.raises(ProxyError) as error,
    ):
        reader.read(VIDEO, 0, 10)
    text = str(error.value)
    assert f"127.0.0.1:{port} (from http_proxy)" in text and "cannot connect" in text
    assert "hidden-pass" not in text and "user" not in text.split("(from")[0].split("//")[1]
    assert isinstance(error.value, StorageError)
    assert reader.metrics()["retries"] == QUICK_RETRY.max_attempts - 1


def test_dataset_streams_through_the_proxy(
    clean_env,
    tls_front,
    connect_proxy,
    lerobot_sim5_url,
    lerobot_reference: LeRobotReference,
    tmp_path: Path,
):
    """EpisodeStreamDataset over https with HTTPS_PROXY set: LeRobot's samples, bit for bit,
    and every connection tunnelled."""
    clean_env.setenv("HTTPS_PROXY", connect_proxy.url)
    clean_env.setenv("HTTP_PROXY", connect_proxy.url)
    with EpisodeStreamDataset(
        tls_front.rebase_url(lerobot_sim5_url),
        image_dtype="uint8",
        cache_dir=tmp_path / "cache",
        reader_options={"verify": str(tls_front.cert)},
    ) as dataset:
        assert len(dataset) == 244
        compared = assert_matches_reference(dataset, lerobot_reference.samples, image_dtype="uint8")
        connections = dataset.metrics()["reader"]["connections"]
    assert compared > 24 * 3 * 96 * 128
    records = connect_proxy.records
    assert len(records) == connections >= 1
    assert {(r.method, r.target, r.status) for r in records} == {
        ("CONNECT", f"localhost:{tls_front.port}", 200)
    }


def test_hub_and_cdn_through_the_proxy_with_one_cdn_host_exempt(clean_env, hub_standin):
    """The Hub stand-in's API and resolve go through HTTP_PROXY in absolute form, and so does
    the CDN host that NO_PROXY does not name; the other CDN host is reached directly. The
    proxy sees the token only where the origin would (the Hub), never on a CDN request."""
    from episodestream.storage import HubRangeReader, Limits

    video = "videos/cam/file-000.mp4"
    data = bytes(range(256)) * 1500
    hub_standin.commit("org/robot", {video: data, "meta/info.json": b"{}"})
    exempt, proxied = (url.removeprefix("http://") for url in hub_standin.cdn_urls)
    with ConnectProxy() as connect_proxy:
        clean_env.setenv("HTTP_PROXY", connect_proxy.url)
        clean_env.setenv("NO_PROXY", exempt.partition(":")[0])
        limits = Limits(coalesce_gap_bytes=-1, split_threshold_bytes=0)
        with HubRangeReader(
            "hf://datasets/org/robot",
            endpoint=hub_standin.endpoint,
            token=hub_standin.token,
            limits=limits,
        ) as reader:
            for offset in range(0, 300_000, 30_000):
                assert reader.read(video, offset, 1000) == data[offset : offset + 1000]
        records = connect_proxy.records
    hub_host = hub_standin.endpoint.removeprefix("http://")
    through = {r.target.removeprefix("http://").partition("/")[0] for r in records}
    assert through == {hub_host, proxied}
    cdn_hosts = {(r.header("Host") or "") for r in hub_standin.cdn_requests}
    assert cdn_hosts == {exempt, proxied}  # both served, one of them directly
    for record in records:
        on_hub = record.target.startswith(hub_standin.endpoint)
        assert ("authorization" in record.headers) is on_hub

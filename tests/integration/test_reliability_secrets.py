"""Secrets: a token goes to the host it belongs to and nowhere else — not to the CDN a Hub
redirect points at, not into logs (DEBUG), metrics, failure logs, exception messages,
sidecar files or the bench's JSON report.

The Hub stand-in (API + resolve on 127.0.0.1, signed-URL CDN on 127.0.0.2) sits behind a
FaultProxy that makes ``resolve`` requests fail now and then, so retries and the failure log
have something to say; its signatures are expired mid-run so files are resolved again.
"""

from __future__ import annotations

import json
import logging
import pickle
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from episodestream import EpisodeStreamDataset, EpisodeStreamError, NotFound, StorageError
from episodestream.cli import main
from episodestream.storage import RetryPolicy
from tests.plugins.storage import HubStandIn
from tests.support.faults import Fault, FaultProxy, RandomFaults
from tests.support.hf_env import reread_hf_environment

REPO = "reliability/sim"
QUICK_RETRY = RetryPolicy(backoff_initial_seconds=0.01, backoff_max_seconds=0.05)
MENU = (Fault("status", status=503), Fault("reset_before"), Fault("truncate"))


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "synthetic_spec.json"
    }


def leaks(token: str, *texts: str) -> list[str]:
    """The texts that contain ``token`` or a telling piece of it."""
    pieces = {token, token[-12:], token[:12]}
    return [text[:200] for text in texts if any(piece in text for piece in pieces)]


def exception_texts(error: BaseException) -> list[str]:
    return [str(error), repr(error), "".join(traceback.format_exception(error))]


@pytest.fixture
def hub(hub_standin: HubStandIn, synthetic_av1: Path) -> Iterator[tuple[HubStandIn, FaultProxy]]:
    hub_standin.commit(REPO, _files(synthetic_av1))
    host, port = hub_standin.endpoint.removeprefix("http://").split(":")
    plan = RandomFaults(MENU, rate=0.3, seed=4, paths_containing=("/resolve/",))
    with FaultProxy((host, int(port)), plan) as proxy:
        yield hub_standin, proxy


#: what huggingface_hub itself asks the endpoint for, unauthenticated (agent detection)
HF_AGENT_REGISTRY_PATH = "/api/agent-harnesses"


def test_hub_token_reaches_only_the_hub_and_never_any_output(
    hub: tuple[HubStandIn, FaultProxy],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    standin, proxy = hub
    token = standin.token
    monkeypatch.setenv("HF_TOKEN", token)  # the ambient login, as huggingface_hub users have
    monkeypatch.setenv("HF_ENDPOINT", proxy.url)
    reread_hf_environment(monkeypatch)  # as a process started so would
    failure_log = tmp_path / "failures.jsonl"
    caplog.set_level(logging.DEBUG)
    options = {"failure_log": failure_log, "retry": QUICK_RETRY, "seed": 1}
    texts: list[str] = []
    with EpisodeStreamDataset(
        f"hf://datasets/{REPO}",
        cache_dir=tmp_path / "cache",
        image_dtype="uint8",
        byte_budget=60_000,
        reader_options=options,
    ) as dataset:
        for index in range(len(dataset)):
            dataset[index]
            if index == len(dataset) // 2:
                standin.expire_signatures()  # cached CDN URLs now answer 403: resolve again
        metrics = dataset.metrics()
        texts += [repr(metrics), json.dumps(metrics["reader"]), repr(dataset)]
        texts += [repr(dataset.dataset.reader), str(dataset.dataset.manifest)]
        reader_metrics = metrics["reader"]
        # the reader is pickled into DataLoader workers: its token must travel (it is the
        # point), so the pickle is the one place it may appear — and the repr is not
        assert token.encode() in pickle.dumps(dataset.dataset.reader)

    # a missing repo and a wrong token end in errors: their text never holds a token
    with pytest.raises(NotFound) as missing:
        EpisodeStreamDataset(
            f"hf://datasets/{REPO}-missing", cache_dir=tmp_path / "c2", reader_options=options
        )
    texts += exception_texts(missing.value)
    wrong = "hf_wrong_secret_token_abcdefghij"
    with pytest.raises(StorageError) as denied:
        EpisodeStreamDataset(
            f"hf://datasets/{REPO}",
            cache_dir=tmp_path / "c3",
            reader_options={**options, "token": wrong},
        )
    assert isinstance(denied.value, EpisodeStreamError)
    assert "401" in str(denied.value)
    denied_texts = exception_texts(denied.value)

    # where it went: every Hub request carried it, no CDN request did
    assert standin.hub_requests and standin.cdn_requests
    # huggingface_hub (>= 1.33) fetches its agent-harness registry from the endpoint once a
    # day, on its own session and without credentials: not our request, and it carries no
    # secret; every other Hub request is ours and carries the token
    ours = [r for r in standin.hub_requests if r.path != HF_AGENT_REGISTRY_PATH]
    assert ours
    assert all(r.header("Authorization") in (f"Bearer {token}", f"Bearer {wrong}") for r in ours)
    for request in standin.hub_requests:
        if request.path == HF_AGENT_REGISTRY_PATH:
            assert request.header("Authorization") is None
    for request in standin.cdn_requests:
        assert request.header("Authorization") is None
        assert not leaks(token, request.path, request.query, json.dumps(request.headers))
    assert reader_metrics["reresolves"] >= 1 and reader_metrics["retries"] >= 1

    log_lines = failure_log.read_text().splitlines()
    assert log_lines, "the fault proxy should have caused logged retries"
    texts += log_lines
    texts += [caplog.text] + [record.getMessage() for record in caplog.records]
    texts += [
        p.read_bytes().decode("latin-1") for p in (tmp_path / "cache").rglob("*") if p.is_file()
    ]
    assert not leaks(token, *texts), leaks(token, *texts)
    assert not leaks(wrong, *denied_texts, caplog.text), leaks(wrong, *denied_texts)
    # and the failure log never keeps a signed query string either
    assert all("signature=" not in line for line in log_lines)


def test_bench_json_report_holds_no_token(
    hub: tuple[HubStandIn, FaultProxy],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``episodestream bench hf://… --json`` with HF_TOKEN set: report, output and logs are
    clean (run in this process: the CLI's ``main``)."""
    standin, proxy = hub
    proxy.set_plan(None)
    monkeypatch.setenv("HF_TOKEN", standin.token)
    monkeypatch.setenv("HF_ENDPOINT", proxy.url)
    reread_hf_environment(monkeypatch)  # as a process started so would
    caplog.set_level(logging.DEBUG)
    report = tmp_path / "bench.json"
    (tmp_path / "work").mkdir()
    status = main(
        [
            "-v",
            "-v",
            "bench",
            f"hf://datasets/{REPO}",
            "--tracks",
            "stream",
            "--samples",
            "24",
            "--keepup-samples",
            "0",
            "--decode-samples",
            "8",
            "--rounds",
            "1",
            "--pool-size",
            "2",
            "--byte-budget",
            "1MiB",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--work-dir",
            str(tmp_path / "work"),
            "--no-progress",
            "--json",
            str(report),
        ]
    )
    output = capsys.readouterr()
    assert status == 0, output.err[-3000:]
    text = report.read_text()
    assert json.loads(text)  # a real report
    assert f"datasets/{REPO}" in text
    assert not leaks(standin.token, text, output.out, output.err, caplog.text)


def test_proxy_password_never_leaves_the_proxy_handshake(
    tls_front,
    lerobot_sim5_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HTTPS_PROXY with credentials: the password goes to the proxy as Proxy-Authorization and
    appears in no log (DEBUG), metrics, failure log, repr or error — neither when the proxy
    takes it nor when it refuses it."""
    from episodestream import ProxyError
    from tests.plugins.proxy import ConnectProxy

    password = "proxy-pa55word-0123456789abcdef"
    wrong = "proxy-wr0ng-pass-0123456789abcdef"
    for name in ("https_proxy", "http_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    caplog.set_level(logging.DEBUG)
    failure_log = tmp_path / "failures.jsonl"
    options = {"verify": str(tls_front.cert), "failure_log": failure_log, "retry": QUICK_RETRY}
    texts: list[str] = []
    with ConnectProxy(credentials=("trainer", password)) as proxy:
        where = proxy.url.removeprefix("http://")
        monkeypatch.setenv("HTTPS_PROXY", f"http://trainer:{password}@{where}")
        with EpisodeStreamDataset(
            tls_front.rebase_url(lerobot_sim5_url),
            cache_dir=tmp_path / "cache",
            image_dtype="uint8",
            reader_options=options,
        ) as dataset:
            for index in range(0, len(dataset), 40):
                dataset[index]
            metrics = dataset.metrics()
            texts += [repr(metrics), json.dumps(metrics["reader"]), repr(dataset)]
            texts += [repr(dataset.dataset.reader)]
        assert proxy.records and {r.status for r in proxy.records} == {200}
        monkeypatch.setenv("HTTPS_PROXY", f"http://trainer:{wrong}@{where}")
        with pytest.raises(ProxyError) as refused:
            EpisodeStreamDataset(
                tls_front.rebase_url(lerobot_sim5_url),
                cache_dir=tmp_path / "cache2",
                reader_options=options,
            )
    assert "HTTPS_PROXY" in str(refused.value) and "407" in str(refused.value)
    texts += exception_texts(refused.value)
    texts += [caplog.text] + [record.getMessage() for record in caplog.records]
    if failure_log.exists():
        texts += failure_log.read_text().splitlines()
    texts += [
        p.read_bytes().decode("latin-1") for p in (tmp_path / "cache").rglob("*") if p.is_file()
    ]
    assert not leaks(password, *texts), leaks(password, *texts)
    assert not leaks(wrong, *texts), leaks(wrong, *texts)

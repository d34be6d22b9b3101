"""CA bundle fallback: certifi's bundle when the system store is empty."""

from __future__ import annotations

import ssl

from episodestream.storage.http import _tls


def test_system_store_used_when_present():
    context = _tls.client_context(True)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_certifi_fills_an_empty_system_store(tmp_path, monkeypatch):
    import certifi

    empty = tmp_path / "certs"
    empty.mkdir()
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(empty))
    bare = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    assert _tls.system_store_is_empty(bare)
    monkeypatch.setattr(_tls.ssl, "create_default_context", _bare_default)
    context = _tls.client_context(True)
    assert context.cert_store_stats()["x509_ca"] > 0
    assert context.verify_mode == ssl.CERT_REQUIRED
    expected = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    expected.load_verify_locations(cafile=certifi.where())
    assert context.cert_store_stats()["x509_ca"] == expected.cert_store_stats()["x509_ca"]


def test_no_verification_and_explicit_bundle(tmp_path):
    off = _tls.client_context(False)
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname
    import certifi

    bundle = _tls.client_context(certifi.where())
    assert bundle.cert_store_stats()["x509_ca"] > 0


def _bare_default(*args, **kwargs) -> ssl.SSLContext:
    """``create_default_context`` on a machine whose CA store is empty."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if kwargs.get("cafile"):
        context.load_verify_locations(cafile=kwargs["cafile"])
    return context

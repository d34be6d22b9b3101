"""TLS contexts for the native HTTP client: the system's CA store, or certifi's bundle when the
system has none (slim containers without ``ca-certificates``), as requests and httpx do."""

from __future__ import annotations

import logging
import os
import ssl

__all__ = ["client_context", "system_store_is_empty"]

logger = logging.getLogger(__name__)


def client_context(verify: bool | str = True) -> ssl.SSLContext:
    """A client context: ``verify`` is ``True`` (system store, else certifi), ``False`` (no
    verification) or the path of a CA bundle."""
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    context = ssl.create_default_context()
    if verify is False:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if system_store_is_empty(context):
        try:
            import certifi
        except ImportError:
            logger.warning(
                "the system CA store is empty and certifi is not installed: HTTPS servers "
                "will fail verification (install certifi or pass verify=<CA bundle path>)"
            )
            return context
        context.load_verify_locations(cafile=certifi.where())
        logger.info("the system CA store is empty: using certifi's bundle %s", certifi.where())
    return context


def system_store_is_empty(context: ssl.SSLContext) -> bool:
    """Whether ``context`` holds no CA certificate and none can be found where OpenSSL looks
    (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` or the default file and folder)."""
    if context.cert_store_stats().get("x509_ca", 0):
        return False
    paths = ssl.get_default_verify_paths()
    cafile = os.environ.get(paths.openssl_cafile_env) or paths.cafile
    capath = os.environ.get(paths.openssl_capath_env) or paths.capath
    if cafile and os.path.isfile(cafile):
        return False
    if capath and os.path.isdir(capath):
        try:
            return not any(entry.is_file() for entry in os.scandir(capath))
        except OSError:
            return True
    return True

"""The HTTP(S) range reader and its own HTTP/1.1 client, in modules of one concern each.

- ``_reader.py``: :class:`HttpRangeReader`, its lifecycle and public reads, planning them
  (split, coalesce, the bounded pool); ``_exchange.py``: one range exchange from request to
  verified bytes; ``_answers.py``: checking answers, redirect targets, small documents;
  ``_state.py``: what the reader knows of each file and the bounds it keeps.
- ``_body.py``: reading bodies; ``_rules.py``: the socket-free rules for answers;
  ``_failures.py``: failures, retries and the failure log; ``_metrics.py``: counters.
- ``_transport.py``: the transport seam; ``_wire.py``: our HTTP/1.1 client on it;
  ``_tls.py``, ``_proxy.py``: TLS contexts and proxies for it.
- ``_redirects.py``: which redirect hosts allow reusing a target; ``_ratelimit.py``:
  reading a server's rate-limit headers; ``_hostgate.py``: sharing a host's rate limit
  between readers and processes.

What the layers above use is exported by ``episodestream.storage``.
"""

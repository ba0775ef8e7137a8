"""One HTTP request to a server's metrics listener (``/metrics``, ``/healthz``, ``/readyz``), for the
tests that scrape or probe it."""

from __future__ import annotations

import http.client


def http_get(address: str, path: str, method: str = "GET") -> tuple[int, str, str]:
    """(status, content type, body) of one request to ``address`` (``host:port``)."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def status_and_body(address: str, path: str) -> tuple[int, str]:
    """(status, body) of a GET of ``path``."""
    status, _, body = http_get(address, path)
    return status, body

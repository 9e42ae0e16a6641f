"""Raw API-server requests through the official `kubernetes` ApiClient, bodies left undecoded.

The client's auth, TLS, proxy and kubeconfig handling is used as is, but responses are never
deserialised into the `kubernetes` model classes (far too slow for 50,000 pods): callers get
the raw bytes or the raw streaming response and decode them with msgspec.  Non-2xx answers
become `ApiStatusError` carrying the v1 Status code, reason and message.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import msgspec


class Status(msgspec.Struct, omit_defaults=True):
    """The fields of a v1 Status meshfit reads."""

    code: int = 0
    reason: str = ""
    message: str = ""


_status_decoder = msgspec.json.Decoder(Status)


class ApiStatusError(Exception):
    """A non-2xx answer from the API server: HTTP status, Status reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status, self.reason, self.message = status, reason, message

    @classmethod
    def from_body(cls, status: int, http_reason: str, body: bytes | str | None) -> "ApiStatusError":
        """Build from a response body that is (usually) a v1 Status."""
        raw = body.encode() if isinstance(body, str) else (body or b"")
        try:
            decoded = _status_decoder.decode(raw)
            return cls(status, decoded.reason or http_reason or "", decoded.message)
        except (msgspec.DecodeError, msgspec.ValidationError):
            text = raw[:200].decode("utf-8", "replace").strip()
            return cls(status, http_reason or "", text)


def open_request(api_client: Any, method: str, path: str, query: Sequence[tuple[str, Any]] = (),
                 body: Any = None, content_type: str | None = None, timeout: Any = None) -> Any:
    """Send one request; returns the urllib3 response, unread (stream or `.data`); ApiStatusError if not 2xx."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    if hasattr(api_client, "param_serialize"):
        method, url, headers, body, post = api_client.param_serialize(
            method=method, resource_path=path, query_params=list(query), header_params=headers, body=body,
            auth_settings=["BearerToken"])
        response = api_client.call_api(method, url, headers, body, post, _request_timeout=timeout).response
    else:  # kubernetes < 31: the older generated ApiClient (raises ApiException itself)
        response = _legacy_request(api_client, method, path, query, headers, body, timeout)
    if not 200 <= response.status <= 299:
        data = response.data
        response.release_conn()
        raise ApiStatusError.from_body(response.status, response.reason, data)
    return response


def _legacy_request(api_client: Any, method: str, path: str, query: Sequence[tuple[str, Any]],
                    headers: dict, body: Any, timeout: Any) -> Any:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 (adapter-only import)

    try:
        return api_client.call_api(path, method, query_params=list(query), header_params=headers, body=body,
                                   auth_settings=["BearerToken"], _preload_content=False,
                                   _return_http_data_only=True, _request_timeout=timeout)
    except ApiException as exc:
        raise ApiStatusError.from_body(exc.status or 0, exc.reason or "", exc.body) from None


def request_bytes(api_client: Any, method: str, path: str, query: Sequence[tuple[str, Any]] = (),
                  body: Any = None, content_type: str | None = None, timeout: Any = None) -> bytes:
    """Send one request and return the whole response body."""
    response = open_request(api_client, method, path, query, body, content_type, timeout)
    try:
        return response.data
    finally:
        response.release_conn()


def iter_lines(response: Any, chunk_size: int = 65536) -> Iterator[bytes]:
    """Newline-delimited records of a streaming (watch) response, as they arrive."""
    pending = b""
    for chunk in response.stream(chunk_size, decode_content=True):
        pending += chunk
        while True:
            line, sep, rest = pending.partition(b"\n")
            if not sep:
                break
            pending = rest
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def pod_getter(api_client: Any, timeout: float = 2.0) -> Callable[[str, str], dict | None]:
    """`get(namespace, name)`: the pod as the API server has it (a plain dict), None when it does not exist."""

    def get(namespace: str, name: str) -> dict | None:
        try:
            return msgspec.json.decode(request_bytes(api_client, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}",
                                                     timeout=timeout))
        except ApiStatusError as exc:
            if exc.status == 404:
                return None
            raise

    return get

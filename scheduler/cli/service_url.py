"""`service_url`: a `--url` as given (`host:port`, `http://...`, `https://...`) made into the URL of a service.

A `--url` without a scheme takes the one the TLS flags imply (https when the command was given TLS files, else
http: neither `meshfit gangs` nor `meshfit submit` has TLS flags yet, so http); a scheme other than http or
https, or no host, is bad input: ValueError with a one-line hint naming the flag.
"""

from __future__ import annotations

from urllib.parse import urlsplit

SCHEMES = ("http", "https")
"""The schemes a meshfit service answers on."""


def service_url(url: str, flag: str = "--url", tls: bool = False) -> str:
    """The service URL for `url` (no trailing slash); ValueError naming `flag` when it cannot be one."""
    text = str(url).strip()
    if "://" not in text:
        text = f"{'https' if tls else 'http'}://{text}"
    parts = urlsplit(text)
    hint = f"{flag} must be http://HOST:PORT or https://HOST:PORT (or HOST:PORT), got {url!r}"
    if parts.scheme not in SCHEMES:
        raise ValueError(f"{hint}: the scheme must be http or https")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{hint}: the port must be a number from 0 to 65535") from None
    if not parts.hostname or (port is None and parts.netloc.endswith(":")):
        raise ValueError(f"{hint}: no host")
    return text.rstrip("/")

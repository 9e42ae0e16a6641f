"""TLS and authentication for `meshfit serve`: HTTPS / mutual TLS, gRPC over TLS, and who may call the verbs.

Flags (all optional; without them meshfit serves plain HTTP and plain gRPC, as before):

- `--tls-cert-file` / `--tls-private-key-file`: HTTPS on the HTTP port (TLS 1.2 minimum) and TLS on
  the gRPC port, with the same certificate.
- `--client-ca-file`: mutual TLS.  The HTTP server *asks* for a client certificate and verifies any
  it gets against this CA (a connection without one still completes, so kubelet probes and
  Prometheus reach /healthz, /readyz, /metrics); every verb (POST to an extender or Volcano verb)
  then requires a verified client certificate: 401 without one.  gRPC requires a client
  certificate signed by the CA at the handshake.
- `--allowed-client-names NAME,...` (with `--client-ca-file`): a verb also needs the certificate's
  subject CN or one of its DNS subjectAltNames to be listed: 403 otherwise.  Default: any
  certificate the CA signed.
- `--verb-token-file FILE` (without a client CA): verbs need `Authorization: Bearer <token>`
  (401 when missing, 403 when wrong); gRPC `Place` with `reserve` needs the same in its metadata.

The verbs are all POSTs to `/filter`, `/prioritize`, `/bind`, `/preempt` (also under `/scheduler`)
and to `/volcano/*`: `/filter`, Volcano `predicate` / `jobEnqueueable` reserve GPUs, `/bind` binds,
`/preempt` chooses victims; the read-only ones are protected too since only the scheduler calls
them.  GET endpoints (/healthz, /readyz, /metrics, /gangs, /reservations, /ranktables) stay open.

How the client certificate reaches the ASGI app: uvicorn puts no TLS information in the ASGI
scope, so `peer_protocol_class` subclasses uvicorn's HTTP protocol (httptools or h11, whichever
uvicorn picks) and, in `connection_made` (called by asyncio once the TLS handshake is complete),
reads `transport.get_extra_info("ssl_object").getpeercert()` - a non-empty dict only for a
certificate the CA verified - and stores the client's names in that connection's copy of
uvicorn's lifespan state, which uvicorn copies into every request's `scope["state"]`.  The
request itself cannot set `scope["state"]`; a missing entry (e.g. another protocol class) counts
as "no certificate", so the check fails closed.

Certificates and the token are read once at start-up (restart to rotate them).
"""

from __future__ import annotations

import hmac
import json
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from topology.textfile import decode_text

PEER_STATE_KEY = "meshfit.tls_peer"
"""Key of the client's `PeerIdentity` in `scope["state"]` (absent / None: no verified certificate)."""
log = logging.getLogger("meshfit.serve")


@dataclass(frozen=True)
class PeerIdentity:
    """The verified client certificate's subject CN(s) and DNS subjectAltNames."""

    common_names: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a `--allowed-client-names` entry may match."""
        return self.common_names + self.dns_names

    def describe(self) -> str:
        """"CN=a, DNS=b" for error messages."""
        parts = [f"CN={n}" for n in self.common_names] + [f"DNS={n}" for n in self.dns_names]
        return ", ".join(parts) or "no CN or DNS name"


def identity_of(cert: Optional[dict]) -> Optional[PeerIdentity]:
    """The `PeerIdentity` of `ssl.SSLObject.getpeercert()`'s dict; None for no (verified) certificate."""
    if not cert:
        return None
    cns = tuple(value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName")
    dns = tuple(value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS")
    return PeerIdentity(cns, dns)


def _read(flag: str, path: Path) -> bytes:
    """The file's bytes, checked to be UTF-8 text (PEM and tokens are ASCII); ValueError naming the flag otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: {exc.strerror or exc}") from None
    decode_text(data, f"{flag} {path}", ValueError, utf8_only=True)
    if not data.strip():
        raise ValueError(f"{flag} {path}: file is empty")
    return data


def _ssl_reason(exc: ssl.SSLError) -> str:
    return getattr(exc, "reason", None) or str(exc)


@dataclass
class ServerTLS:
    """The serving certificate (and optional client CA), checked, for HTTP and gRPC."""

    cert_file: Path
    key_file: Path
    client_ca_file: Optional[Path] = None
    cert_pem: bytes = b""
    key_pem: bytes = b""
    client_ca_pem: Optional[bytes] = None
    context: ssl.SSLContext = field(default=None)  # type: ignore[assignment]

    @classmethod
    def load(cls, cert_file: Path, key_file: Path, client_ca_file: Optional[Path] = None) -> "ServerTLS":
        """Read and check the files; ValueError with one line naming the flag when one is missing, unreadable,
        not PEM, or the key does not match the certificate."""
        tls = cls(Path(cert_file), Path(key_file), Path(client_ca_file) if client_ca_file else None)
        tls.cert_pem = _read("--tls-cert-file", tls.cert_file)
        tls.key_pem = _read("--tls-private-key-file", tls.key_file)
        if tls.client_ca_file is not None:
            tls.client_ca_pem = _read("--client-ca-file", tls.client_ca_file)
        if b"-----BEGIN CERTIFICATE-----" not in tls.cert_pem:
            raise ValueError(f"--tls-cert-file {tls.cert_file}: no PEM certificate in the file")
        if b"PRIVATE KEY-----" not in tls.key_pem:
            raise ValueError(f"--tls-private-key-file {tls.key_file}: no PEM private key in the file")
        if b"ENCRYPTED" in tls.key_pem:
            raise ValueError(f"--tls-private-key-file {tls.key_file}: the key is encrypted; give it unencrypted "
                             f"(e.g. openssl pkey -in KEY -out PLAIN_KEY), as Kubernetes TLS Secrets hold it")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file), password=lambda: b"")  # never a prompt
        except ssl.SSLError as exc:
            reason = _ssl_reason(exc)
            if "MISMATCH" in reason.upper():
                reason = "the private key does not match the certificate"
            elif "PEM" in reason.upper():
                reason = f"not a valid PEM certificate and private key ({' '.join(reason.split())})"
            raise ValueError(f"--tls-cert-file {tls.cert_file} / --tls-private-key-file {tls.key_file}: "
                             f"{reason}") from None
        except OSError as exc:
            raise ValueError(f"--tls-cert-file {tls.cert_file}: {exc.strerror or exc}") from None
        if tls.client_ca_pem is not None:
            if b"-----BEGIN CERTIFICATE-----" not in tls.client_ca_pem:
                raise ValueError(f"--client-ca-file {tls.client_ca_file}: no PEM certificate in the file")
            try:
                context.load_verify_locations(cadata=tls.client_ca_pem.decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as exc:
                reason = _ssl_reason(exc) if isinstance(exc, ssl.SSLError) else str(exc)
                raise ValueError(f"--client-ca-file {tls.client_ca_file}: {reason}") from None
            # Optional at the handshake: probes and scrapers connect without a certificate; the verbs
            # refuse such connections (VerbAuth).  A certificate that is sent must verify.
            context.verify_mode = ssl.CERT_OPTIONAL
        context.set_alpn_protocols(["http/1.1"])
        tls.context = context
        return tls

    @property
    def mutual(self) -> bool:
        """True with a client CA (mutual TLS)."""
        return self.client_ca_pem is not None

    def grpc_credentials(self) -> Any:
        """`grpc.ssl_server_credentials` with the same certificate; client certificates required with a CA."""
        import grpc

        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)], root_certificates=self.client_ca_pem,
                                           require_client_auth=self.mutual)


def _deny(status: int, reason: str, extra_headers: tuple = ()) -> tuple[int, bytes, list]:
    body = json.dumps({"error": " ".join(reason.split())}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *extra_headers]
    return status, body, headers


@dataclass
class VerbAuth:
    """Who may call the verbs: verified client certificates (optionally with given names), or a bearer token."""

    mode: str  # "client-cert" or "token"
    allowed_names: frozenset[str] = frozenset()
    token: bytes = b""

    def check_scope(self, scope: dict) -> Optional[tuple[int, bytes, list]]:
        """None when the request may call its verb, else (status, JSON body, headers) of the refusal."""
        verb = scope.get("path", "")
        if self.mode == "client-cert":
            peer = (scope.get("state") or {}).get(PEER_STATE_KEY)
            return self._check_peer(peer, verb)
        header = b""
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                header = value
                break
        return self._check_token(header, verb)

    def _check_peer(self, peer: Optional[PeerIdentity], verb: str) -> Optional[tuple[int, bytes, list]]:
        if peer is None:
            return _deny(401, f"{verb} needs a client certificate signed by meshfit's --client-ca-file "
                              f"(only the scheduler may call the verbs)")
        if self.allowed_names and not self.allowed_names.intersection(peer.names):
            return _deny(403, f"client certificate ({peer.describe()}) is not in meshfit's --allowed-client-names; "
                              f"only the scheduler may call {verb}")
        return None

    def _check_token(self, header: bytes, verb: str) -> Optional[tuple[int, bytes, list]]:
        scheme, _, presented = header.strip().partition(b" ")
        if not header or scheme.lower() != b"bearer":
            return _deny(401, f"{verb} needs an Authorization: Bearer token (meshfit serve --verb-token-file)",
                         ((b"www-authenticate", b'Bearer realm="meshfit"'),))
        if not hmac.compare_digest(presented.strip(), self.token):
            return _deny(403, f"wrong bearer token for {verb}")
        return None

    def grpc_refusal(self, context: Any) -> Optional[tuple[Any, str]]:
        """None when the gRPC caller may reserve, else (grpc.StatusCode, reason)."""
        import grpc

        if self.mode == "client-cert":
            if not self.allowed_names:
                return None  # the handshake already required a certificate signed by the CA
            auth = context.auth_context() or {}
            names = {v.decode("utf-8", "replace") for key in ("x509_common_name", "x509_subject_alternative_name")
                     for v in auth.get(key, ())}
            if self.allowed_names.intersection(names):
                return None
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"client certificate ({', '.join(sorted(names)) or 'no names'}) is not in meshfit's "
                    f"--allowed-client-names; only the scheduler may reserve")
        header = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode("latin-1")
        scheme, _, presented = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return grpc.StatusCode.UNAUTHENTICATED, "reserving needs authorization: Bearer <token> metadata"
        if not hmac.compare_digest(presented.strip().encode(), self.token):
            return grpc.StatusCode.PERMISSION_DENIED, "wrong bearer token"
        return None


def parse_names(text: Optional[str]) -> frozenset[str]:
    """`a,b, c` -> {"a", "b", "c"}."""
    return frozenset(n.strip() for n in (text or "").split(",") if n.strip())


def security_from_flags(cert_file: Optional[Path], key_file: Optional[Path], client_ca_file: Optional[Path],
                        allowed_client_names: Optional[str], verb_token_file: Optional[Path],
                        ) -> tuple[Optional[ServerTLS], Optional[VerbAuth]]:
    """(TLS or None, verb authorization or None) from `meshfit serve`'s flags; ValueError with one line."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file go together: give both or neither")
    if client_ca_file is not None and cert_file is None:
        raise ValueError("--client-ca-file needs --tls-cert-file and --tls-private-key-file (mutual TLS is TLS)")
    names = parse_names(allowed_client_names)
    if allowed_client_names is not None and client_ca_file is None:
        raise ValueError("--allowed-client-names needs --client-ca-file (names come from verified client "
                         "certificates)")
    if allowed_client_names is not None and not names:
        raise ValueError("--allowed-client-names needs at least one name (comma-separated)")
    if verb_token_file is not None and client_ca_file is not None:
        raise ValueError("--verb-token-file and --client-ca-file are alternatives: with a client CA the verbs "
                         "require a client certificate")
    tls = ServerTLS.load(cert_file, key_file, client_ca_file) if cert_file is not None else None
    auth = None
    if tls is not None and tls.mutual:
        auth = VerbAuth("client-cert", names)
    elif verb_token_file is not None:
        token = _read("--verb-token-file", verb_token_file).strip()
        if len(token.split()) != 1 or len(token) < 16:
            raise ValueError(f"--verb-token-file {verb_token_file}: the token must be one word of at least 16 "
                             f"characters")
        auth = VerbAuth("token", token=token)
        if tls is None:
            log.warning("--verb-token-file without --tls-cert-file: the bearer token crosses the network in clear "
                        "text")
    return tls, auth


def peer_protocol_class(base: Optional[type] = None) -> type:
    """uvicorn's HTTP protocol class (`base`, default the one "auto" picks: httptools, else h11) recording the
    client certificate per connection.

    asyncio calls `connection_made` after the TLS handshake; the identity goes into this
    connection's own copy of uvicorn's lifespan state, which uvicorn copies into each request's
    `scope["state"]` (both its httptools and h11 protocols build the scope that way).
    """
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base

    class PeerCertProtocol(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            ssl_object = transport.get_extra_info("ssl_object")
            peer = identity_of(ssl_object.getpeercert()) if ssl_object is not None else None
            self.app_state = {**getattr(self, "app_state", {}), PEER_STATE_KEY: peer}
            super().connection_made(transport)

    return PeerCertProtocol

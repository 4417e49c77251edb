"""The webhook's serving certificate: self-made (CA + leaf, rotated before expiry, kept in a Secret) or from files.

Self-signed mode: an ECDSA P-256 CA (10 years by default) signs a serving certificate (1 year) for the Service's
DNS names. Both live in a Secret so every replica serves a certificate the same CA signed and a restart keeps
them. The leaf is re-issued `rotate_before_days` before it expires (or when the SANs change); the CA is renewed
when it would not outlive a new leaf, and the caBundle then carries the old and the new CA until the old one
expires, so certificates of either are trusted while replicas catch up. Replicas racing to write the Secret use
optimistic concurrency: the loser re-reads and adopts the winner's certificates.

Files mode: cert-manager (or anything else) writes `tls.crt`/`tls.key`; they are reloaded when they change.

`ssl.SSLContext` only loads certificates from files, so the current pair is written to a private temporary
directory (mode 0700) that is removed at exit.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from migctl.config.webhook import TlsSettings

log = logging.getLogger(__name__)
Clock = Callable[[], dt.datetime]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes. `ca_pem` is what clients trust (one or two CAs); `ca_key_pem` is None outside self-signed mode."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_key_pem: bytes | None = None

    def to_secret_data(self) -> dict[str, bytes]:
        data = {"ca.crt": self.ca_pem, "tls.crt": self.cert_pem, "tls.key": self.key_pem}
        if self.ca_key_pem:
            data["ca.key"] = self.ca_key_pem
        return data

    @classmethod
    def from_secret_data(cls, data: dict[str, bytes]) -> CertBundle | None:
        try:
            return cls(data["ca.crt"], data["tls.crt"], data["tls.key"], data.get("ca.key"))
        except KeyError:
            return None


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_usage(ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(validity_days: int, now: dt.datetime, name: str = "migctl-webhook-ca") -> tuple[bytes, bytes]:
    """(CA cert PEM, CA key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"{name}-{now.strftime('%Y%m%d%H%M%S')}")]
    )  # a distinct name per CA, so an old and a new CA in one bundle are told apart
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=validity_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _pem_cert(cert), _pem_key(key)


def issue_serving(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    validity_days: int,
    now: dt.datetime,
) -> tuple[bytes, bytes]:
    """(serving cert PEM, key PEM) signed by the CA, for these SANs; never outlives the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    cn = dns_names[0] if dns_names else "migctl-webhook"
    end = min(now + dt.timedelta(days=validity_days), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn[:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _pem_cert(cert), _pem_key(key)


def _certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(ext.get_values_for_type(x509.DNSName)), {str(a) for a in ext.get_values_for_type(x509.IPAddress)}


def renewal_reason(
    bundle: CertBundle | None,
    settings: TlsSettings,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: dt.datetime,
) -> tuple[bool, str]:
    """(renew the CA too?, why the serving certificate must be re-issued; "" if it is fine)."""
    if bundle is None or bundle.ca_key_pem is None:
        return True, "no certificate yet"
    try:
        cas = _certs(bundle.ca_pem)
        leaf = x509.load_pem_x509_certificate(bundle.cert_pem)
        ca = x509.load_pem_x509_certificate(_signing_ca(bundle))
    except ValueError as e:
        return True, f"unreadable certificate: {e}"
    if not cas:
        return True, "no CA certificate"
    # The CA must outlive a fresh leaf, or the leaf would be cut short.
    if ca.not_valid_after_utc < now + dt.timedelta(days=settings.validity_days):
        return True, f"the CA expires {ca.not_valid_after_utc:%Y-%m-%d}"
    if leaf.issuer != ca.subject:
        return False, "the serving certificate was not issued by the current CA"
    if leaf.not_valid_after_utc < now + dt.timedelta(days=settings.rotate_before_days):
        return False, f"the serving certificate expires {leaf.not_valid_after_utc:%Y-%m-%d %H:%M}"
    have_dns, have_ip = _sans(leaf)
    if have_dns != set(dns_names) or have_ip != {str(ipaddress.ip_address(a)) for a in ip_addresses}:
        return False, "the serving certificate's names changed"
    return False, ""


def _signing_ca(bundle: CertBundle) -> bytes:
    """The CA certificate matching `ca_key_pem` (the bundle may also hold an older CA)."""
    assert bundle.ca_key_pem is not None
    key = serialization.load_pem_private_key(bundle.ca_key_pem, password=None)
    pub = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    for c in _certs(bundle.ca_pem):
        if (
            c.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
            == pub
        ):
            return _pem_cert(c)
    raise ValueError("no CA certificate in ca.crt matches ca.key")


def renew(
    bundle: CertBundle | None,
    settings: TlsSettings,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: dt.datetime,
) -> tuple[CertBundle, str]:
    """The bundle to use from now on and why it changed ("" = unchanged, same object returned)."""
    renew_ca, why = renewal_reason(bundle, settings, dns_names, ip_addresses, now)
    if not renew_ca and not why:
        assert bundle is not None
        return bundle, ""
    if renew_ca or bundle is None or bundle.ca_key_pem is None:
        ca_pem, ca_key = new_ca(settings.ca_validity_days, now)
        keep = b""
        if bundle is not None:  # keep older CAs that are still valid, so their leaves stay trusted
            try:
                keep = b"".join(_pem_cert(c) for c in _certs(bundle.ca_pem) if c.not_valid_after_utc > now)
            except ValueError:
                keep = b""
        trust = ca_pem + keep
    else:
        ca_key = bundle.ca_key_pem
        ca_pem = _signing_ca(bundle)
        trust = b"".join(_pem_cert(c) for c in _certs(bundle.ca_pem) if c.not_valid_after_utc > now) or ca_pem
    cert, key = issue_serving(ca_pem, ca_key, dns_names, ip_addresses, settings.validity_days, now)
    return CertBundle(trust, cert, key, ca_key), why or "new CA"


def not_after(cert_pem: bytes) -> dt.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def service_dns_names(service: str, namespace: str, extra: Sequence[str] = ()) -> list[str]:
    names = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", f"{service}.{namespace}"]
    names += [service, "localhost"]
    return list(dict.fromkeys([*names, *extra]))


class ServingContext:
    """The current server-side `ssl.SSLContext`; `load()` swaps in a new certificate for new connections.

    `ssl` reads a certificate only from files, so each `load()` writes the pair into a private temporary folder
    that it removes before returning: nothing is left on disk, whether or not `close()` is ever called."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None

    def load(self, cert_pem: bytes, key_pem: bytes) -> None:
        with self._lock, tempfile.TemporaryDirectory(prefix="migctl-webhook-tls-") as tmp:
            folder = Path(tmp)
            os.chmod(folder, 0o700)
            cert_path, key_path = folder / "tls.crt", folder / "tls.key"
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key_pem)
            cert_path.write_bytes(cert_pem)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(str(cert_path), str(key_path))
            self._context = ctx

    @property
    def context(self) -> ssl.SSLContext:
        with self._lock:
            if self._context is None:
                raise RuntimeError("no serving certificate loaded yet")
            return self._context

    @property
    def loaded(self) -> bool:
        return self._context is not None

    def close(self) -> None:
        """Nothing to release (kept for callers that stop the server)."""

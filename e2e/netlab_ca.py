"""A test root certificate authority for the network lab: a root, and server certificates it issues for the lab's
names and addresses, written as PEM files that clients (``curl --cacert``, ``pip --cert``, a box's CA bundle) and
the lab's HTTPS servers read.

Keys are ECDSA P-256 (fast to make); the extensions are the ones strict verifiers (OpenSSL 3, Python's
``VERIFY_X509_STRICT``) require: key identifiers, key usage, basic constraints, and names only in the
subjectAltName.  Nothing here is trusted outside the test that made it.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=2)
BACKDATED_BY = datetime.timedelta(hours=1)  # clocks of test machines drift; a certificate valid "from now" may not be


@dataclass(frozen=True)
class ServerCertificate:
    """A server certificate (PEM, the leaf alone) and its private key (PEM, unencrypted), as files."""

    certificate: Path
    key: Path


class LabRootCA:
    """A root CA whose certificate is written to ``pem_path``; its key stays in memory and dies with the test."""

    def __init__(self, directory: Path, common_name: str = "tkbox netlab test root") -> None:
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        public_key = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATED_BY)
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(digital_signature=False, cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pem_path = directory / "netlab-root.pem"
        self.pem_path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, names: Sequence[str], addresses: Sequence[str] = ()) -> ServerCertificate:
        """A server certificate for ``names`` (DNS, wildcards allowed) and ``addresses`` (IP literals), written as
        ``<stem>.pem`` and ``<stem>.key`` next to the root."""
        if not names and not addresses:
            raise ValueError("a server certificate needs at least one name or address")
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alternative_names: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
        alternative_names += [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (list(names) or list(addresses))[0])]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATED_BY)
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(digital_signature=True, cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )
        files = ServerCertificate(self.directory / f"{stem}.pem", self.directory / f"{stem}.key")
        files.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        files.key.touch(mode=0o600)
        files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
        return files


def _key_usage(*, digital_signature: bool, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=digital_signature, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign,
                         encipher_only=False, decipher_only=False)

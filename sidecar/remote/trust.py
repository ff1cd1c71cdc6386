"""Which CA certificates an ``s3://`` remote trusts: one bundle, resolved as botocore resolves its
``verify``, used by both of the remote's TLS clients so that the two can never disagree.

Why one: the presigned fast path (:mod:`.httpget`: listing pages and object GETs) and botocore's
client (the HEAD of a multipart object's part, ranged reads, uploads, the fallbacks) are two
clients of the same endpoint. Left to themselves they trust different CAs: ``http.client`` loads
OpenSSL's defaults (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, the system store), botocore certifi's
bundle (or ``AWS_CA_BUNDLE``, a profile's ``ca_bundle``). A private CA trusted by one only then
lists and downloads the small objects and skips every multipart one, or refuses at the start a
setup that boto3 accepts.

The order is botocore's (``Session.create_client``, then its ``Endpoint``): ``AWS_CA_BUNDLE``,
else ``ca_bundle`` in the AWS profile (``AWS_PROFILE``, in ``AWS_CONFIG_FILE`` or
``~/.aws/config``), else ``REQUESTS_CA_BUNDLE``, else botocore's default bundle (certifi's;
botocore's own ``cacert.pem`` without certifi). ``SSL_CERT_FILE``, ``SSL_CERT_DIR`` and the
system store are not read, as botocore does not read them (a warning says so when one is set).
An empty value counts as unset. The bundle is pinned on botocore's session (:meth:`Trust.pin`),
so its client verifies against that very file. A bundle the user named is loaded at the start
(:meth:`Trust.checked`): a missing file, a folder or a file without a certificate is refused
then in one line naming the setting and the path, not met as a bare ``FileNotFoundError`` at the
first connection.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import ssl
import threading
from typing import Any

from epochfs.sidecar.remote.base import RemoteError

log = logging.getLogger("epochfs.remote")

DEFAULT = "botocore's default CA bundle"
"""What :attr:`Trust.setting` says when no setting names a bundle."""

_warned = threading.Event()
"""Set once the warning that ``SSL_CERT_FILE`` is not read has been logged."""


class TrustSettingError(RemoteError):
    """A CA bundle setting that cannot be used (no such file, a folder, no certificate in it)."""


class Trust:
    """The CA bundle of one ``s3://`` remote: ``cafile``, and ``setting`` that named it."""

    def __init__(self, cafile: str, setting: str) -> None:
        self.cafile = cafile
        self.setting = setting
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Trust({self.setting}: {self.cafile})"

    def context(self) -> ssl.SSLContext:
        """The fast path's TLS context, loaded once (tens of ms for a full bundle) and shared by
        every connection: the target's certificate, and an ``https://`` proxy's."""
        with self._lock:
            if self._context is None:
                self._context = ssl.create_default_context(cafile=self.cafile)
            return self._context

    def pin(self, session: Any) -> Any:
        """``session`` (botocore's) set to verify against :attr:`cafile`: its ``ca_bundle`` wins
        over the environment and the profile, and a bundle given always reaches the client."""
        session.set_config_variable("ca_bundle", self.cafile)
        return session

    def checked(self, endpoint: str | None) -> str | None:
        """``endpoint`` once this bundle can verify it: for ``https://`` (or AWS's own, None) a
        bundle a setting named is loaded now, and one that cannot be is refused
        (:class:`TrustSettingError`); a plain ``http://`` endpoint never reads it, as in botocore."""
        if endpoint is not None and not endpoint.lower().startswith("https://"):
            return endpoint
        if self.setting == DEFAULT:
            ignored = [name for name in ("SSL_CERT_FILE", "SSL_CERT_DIR") if os.environ.get(name)]
            if ignored and not _warned.is_set():  # once a process, however many remotes it opens
                _warned.set()
                log.warning("%s is set, but S3 requests do not read it, as botocore's do not: they "
                            "trust %s (%s); a private CA's bundle goes in AWS_CA_BUNDLE (or ca_bundle "
                            "in the AWS profile)", " and ".join(ignored), DEFAULT, self.cafile)
            return endpoint
        try:
            self.context()
        except OSError as e:  # ssl.SSLError among them: a file without a certificate
            refused = f"{self.setting}: {self.cafile}: {_why(e)}"
        else:
            log.info("S3 TLS certificates are checked against %s (%s)", self.cafile, self.setting)
            return endpoint
        # Raised outside the handler: the load's error in its chain would read as a passing TLS
        # failure (errors.may_answer_later), and the sampler would start again for ever.
        raise TrustSettingError(refused)


def _why(e: OSError) -> str:
    """Why a bundle could not be loaded, in a user's words."""
    if isinstance(e, FileNotFoundError):
        what = "no such file"
    elif isinstance(e, IsADirectoryError):
        what = "a folder, not a file"
    elif isinstance(e, ssl.SSLError):
        what = f"no PEM certificate in it ({e.reason or e})"
    else:
        what = f"cannot be read ({e.strerror or e})"
    return f"{what}; it must be the PEM file of the CA that signed the S3 endpoint's TLS certificate"


def default_bundle() -> str:
    """botocore's own default (``botocore.httpsession.where``): certifi's bundle, else the
    ``cacert.pem`` botocore ships; found without importing botocore (about 0.4 s with its client)."""
    try:
        import certifi
    except ImportError:
        spec = importlib.util.find_spec("botocore")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        return os.path.join(folders[0] if folders else "", "cacert.pem")
    return str(certifi.where())


def _profile_bundle() -> tuple[str, str] | None:
    """``ca_bundle`` of the AWS profile botocore would use, with the words naming it; None when the
    profile sets none or the configuration cannot be read (botocore's client refuses that)."""
    import botocore.session
    from botocore import exceptions as bce

    session = botocore.session.Session()
    try:
        value = str(session.get_scoped_config().get("ca_bundle") or "").strip()
    except (bce.ProfileNotFound, bce.ConfigParseError, bce.ConfigNotFound):
        return None  # botocore's client refuses the configuration in its words (s3client.new_client)
    if not value:
        return None
    profile = session.get_config_variable("profile") or "default"
    config = os.path.expanduser(str(session.get_config_variable("config_file")))
    return value, f"ca_bundle of AWS profile {profile!r} in {config}"


def resolve_trust(*, profiles: bool) -> Trust:
    """The one bundle of an ``s3://`` remote, in botocore's order (see the module), from this
    process's environment. ``profiles``: whether an AWS config file may apply (botocore's client
    is made then anyway); without one botocore is not imported, and no profile names a bundle."""
    env = os.environ
    given = env.get("AWS_CA_BUNDLE", "").strip()
    if given:
        return Trust(given, "AWS_CA_BUNDLE")
    found = _profile_bundle() if profiles else None
    if found is not None:
        return Trust(*found)
    requests = env.get("REQUESTS_CA_BUNDLE", "").strip()
    if requests:
        return Trust(requests, "REQUESTS_CA_BUNDLE")
    return Trust(default_bundle(), DEFAULT)


__all__ = ["DEFAULT", "Trust", "TrustSettingError", "default_bundle", "resolve_trust"]

"""The S3 credential chain, resolved locally: arguments, environment, shared files, then
instance metadata (only when asked for) or anonymous access.

obstore's own default chain ends at the cloud instance-metadata endpoint (a link-local
address), with retries, and ignores ``AWS_EC2_METADATA_DISABLED``: on a laptop or a cluster
node that is seconds of stall per open, and traffic to an address that is not ours. So the
store resolves credentials here, without any network request, and hands obstore either
explicit keys or ``skip_signature``; obstore's chain runs only when the caller opts in.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import StoreError

__all__ = ["INSTANCE_METADATA_ENV", "Credentials", "s3_credentials"]

#: set to 1 / true / yes to let obstore's chain (and the instance-metadata endpoint) run
INSTANCE_METADATA_ENV = "SHARDSTORE_S3_INSTANCE_METADATA"


@dataclass(frozen=True)
class Credentials:
    """What ``s3_credentials`` found; ``source`` says where (for messages and tests)."""

    source: str
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    region: str | None = None


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _read_ini(path: Path) -> configparser.ConfigParser | None:
    if not path.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError, OSError) as e:
        raise StoreError(f"cannot read the AWS shared file {str(path)!r}: {e}") from e
    return parser


def _from_files(profile: str) -> Credentials | None:
    """Keys (and region) of ``profile`` in the shared credentials file, then the config file
    (whose sections are ``[profile NAME]``, or ``[default]``)."""
    home = Path.home()
    cred_path = Path(_env("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials").expanduser()
    conf_path = Path(_env("AWS_CONFIG_FILE") or home / ".aws" / "config").expanduser()
    conf = _read_ini(conf_path)
    conf_section = profile if profile == "default" else f"profile {profile}"
    region = conf.get(conf_section, "region", fallback=None) if conf is not None else None
    for path, parser, section in ((cred_path, _read_ini(cred_path), profile), (conf_path, conf, conf_section)):
        if parser is None or not parser.has_section(section):
            continue
        key = parser.get(section, "aws_access_key_id", fallback=None)
        secret = parser.get(section, "aws_secret_access_key", fallback=None)
        if key and secret:
            token = parser.get(section, "aws_session_token", fallback=None)
            return Credentials(f"file:{path} [{profile}]", key, secret, token or None, region)
        if key or secret:
            raise StoreError(f"AWS profile {profile!r} in {str(path)!r} has only one of aws_access_key_id / "
                             "aws_secret_access_key")
    return Credentials("anonymous", region=region) if region else None


def s3_credentials(
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    *,
    anonymous: bool = False,
    profile: str | None = None,
    instance_metadata: bool | None = None,
) -> Credentials:
    """The first source of S3 credentials, in the documented order; never a network request."""
    if anonymous:
        return Credentials("anonymous")
    if access_key_id is not None and secret_access_key is not None:
        return Credentials("arguments", access_key_id, secret_access_key, session_token)
    key, secret = _env("AWS_ACCESS_KEY_ID"), _env("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return Credentials("environment", key, secret, session_token or _env("AWS_SESSION_TOKEN"))
    found = _from_files(profile or _env("AWS_PROFILE") or "default")
    if found is not None and found.access_key_id:
        return found
    region = found.region if found is not None else None
    if instance_metadata is None:
        instance_metadata = _truthy(_env(INSTANCE_METADATA_ENV))
    if instance_metadata:
        return Credentials("instance-metadata", region=region)
    if profile is not None:
        raise StoreError(f"no credentials for AWS profile {profile!r} in the shared credentials or config file")
    return Credentials("anonymous", region=region)

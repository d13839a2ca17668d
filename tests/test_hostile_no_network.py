"""No surprise network calls: the S3 credential chain is explicit and never reaches the cloud
instance-metadata endpoint (169.254.169.254) unless asked for.

- The order (arguments, environment, shared credentials/config files, instance metadata when
  asked, else anonymous) is checked on ``s3_credentials`` and on the obstore client the store
  builds (explicit keys or ``skip_signature``: obstore's own chain never runs).
- In a network namespace (``unshare -n``) where 169.254.169.254 is a local listener that
  counts connections, opening and reading ``s3://`` with no credentials anywhere contacts it
  0 times and fails fast with a message saying how to pass credentials; the positive control
  (``instance_metadata=True``) does contact it, so the listener would see a leak.
- The ``_net_audit`` plugin fails any test here that opens a Python socket to a non-loopback
  address.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shardstore.errors import StoreError
from shardstore.store._aws_credentials import INSTANCE_METADATA_ENV, s3_credentials
from shardstore.store.s3 import S3Store

pytest_plugins = ["_net_audit"]
pytestmark = pytest.mark.timeout(120)

AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
            "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3", INSTANCE_METADATA_ENV)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AWS variables, and a HOME without ~/.aws (returned, to write files into)."""
    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _write_aws(home: Path, credentials: str = "", config: str = "") -> None:
    (home / ".aws").mkdir(exist_ok=True)
    if credentials:
        (home / ".aws" / "credentials").write_text(textwrap.dedent(credentials))
    if config:
        (home / ".aws" / "config").write_text(textwrap.dedent(config))


def test_chain_order(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert s3_credentials().source == "anonymous"
    _write_aws(clean_env, config="""
        [profile other]
        region = eu-west-3
        aws_access_key_id = conf-key
        aws_secret_access_key = conf-secret
        [default]
        region = ap-south-1
        """)
    assert s3_credentials() == s3_credentials().__class__("anonymous", region="ap-south-1")
    got = s3_credentials(profile="other")
    assert (got.access_key_id, got.region) == ("conf-key", "eu-west-3") and got.source.startswith("file:")
    _write_aws(clean_env, credentials="""
        [default]
        aws_access_key_id = file-key
        aws_secret_access_key = file-secret
        aws_session_token = file-token
        [other]
        aws_access_key_id = other-key
        aws_secret_access_key = other-secret
        """)
    got = s3_credentials()
    assert (got.access_key_id, got.secret_access_key, got.session_token) == ("file-key", "file-secret", "file-token")
    assert got.source == f"file:{clean_env / '.aws' / 'credentials'} [default]" and got.region == "ap-south-1"
    monkeypatch.setenv("AWS_PROFILE", "other")
    assert s3_credentials().access_key_id == "other-key"  # the credentials file before the config file
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    assert (s3_credentials().source, s3_credentials().access_key_id) == ("environment", "env-key")
    got = s3_credentials("arg-key", "arg-secret")
    assert (got.source, got.access_key_id) == ("arguments", "arg-key")
    assert s3_credentials("arg-key", "arg-secret", anonymous=True).source == "anonymous"


def test_instance_metadata_only_when_asked(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert s3_credentials().source == "anonymous"
    assert s3_credentials(instance_metadata=True).source == "instance-metadata"
    monkeypatch.setenv(INSTANCE_METADATA_ENV, "1")
    assert s3_credentials().source == "instance-metadata"
    assert s3_credentials(instance_metadata=False).source == "anonymous"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert s3_credentials().source == "environment"  # keys found first: no metadata lookup


def test_missing_profile_and_half_keys_are_clear_errors(clean_env: Path) -> None:
    with pytest.raises(StoreError, match="'nope'"):
        s3_credentials(profile="nope")
    _write_aws(clean_env, credentials="[default]\naws_access_key_id = only-key\n")
    with pytest.raises(StoreError, match="only one of"):
        s3_credentials()


def test_store_hands_obstore_keys_or_skip_signature(clean_env: Path) -> None:
    """obstore's default chain (which ends at the metadata endpoint) runs only on request."""
    anon = S3Store("bucket", "p", endpoint="http://127.0.0.1:9")
    assert anon.credential_source == "anonymous"
    assert anon._client.config.get("skip_signature") in (True, "true")
    keyed = S3Store("bucket", "p", endpoint="http://127.0.0.1:9", access_key_id="a", secret_access_key="b")
    assert keyed.credential_source == "arguments" and keyed._client.config["access_key_id"] == "a"
    assert "skip_signature" not in keyed._client.config
    _write_aws(clean_env, credentials="[default]\naws_access_key_id = fk\naws_secret_access_key = fs\n")
    filed = S3Store("bucket", "p", endpoint="http://127.0.0.1:9")
    assert filed.credential_source.startswith("file:") and filed._client.config["access_key_id"] == "fk"
    asked = S3Store("bucket", "p", endpoint="http://127.0.0.1:9", instance_metadata=True, profile=None)
    assert asked.credential_source == "file:" + str(clean_env / ".aws" / "credentials") + " [default]"


def test_uploads_are_hashed_into_their_signature_only_without_tls(clean_env: Path) -> None:
    """Over HTTPS (AWS's default endpoint included) a put's body is sent as UNSIGNED-PAYLOAD,
    as botocore does: TLS protects it, and hashing every value costs a SHA-256 pass; over plain
    HTTP the signature covers the body. The caller's ``config`` has the last word."""
    keys = {"access_key_id": "a", "secret_access_key": "b"}
    unsigned = {endpoint: S3Store("bucket", "p", endpoint=endpoint, **keys)._client.config.get("unsigned_payload")
                for endpoint in ("https://s3.example.org", "HTTPS://s3.example.org", "http://127.0.0.1:9", None)}
    assert unsigned == {"https://s3.example.org": "true", "HTTPS://s3.example.org": "true",
                        "http://127.0.0.1:9": "false", None: "true"}
    told = S3Store("bucket", "p", endpoint="https://s3.example.org", config={"unsigned_payload": False}, **keys)
    assert told._client.config["unsigned_payload"] == "false"
    anon = S3Store("bucket", "p", endpoint="https://s3.example.org")
    assert anon.credential_source == "anonymous" and "unsigned_payload" not in anon._client.config


# -- the network namespace proof -----------------------------------------------------------

_PROBE = r'''
import json, os, socket, subprocess, sys, threading, time
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(["ip", "addr", "add", "169.254.169.254/32", "dev", "lo"], check=True)
hits = []
imds = socket.socket(); imds.bind(("169.254.169.254", 80)); imds.listen(16)
def serve_imds():
    while True:
        c, _ = imds.accept(); hits.append(1); c.close()
threading.Thread(target=serve_imds, daemon=True).start()
# an S3 endpoint on loopback that denies everything, as a private bucket does to unsigned requests
s3 = socket.socket(); s3.bind(("127.0.0.1", 0)); s3.listen(16)
body = b'<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
def serve_s3():
    while True:
        c, _ = s3.accept()
        try:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        finally:
            c.close()
threading.Thread(target=serve_s3, daemon=True).start()
import shardstore
opts = json.loads(sys.argv[1])
opts["endpoint"] = f"http://127.0.0.1:{s3.getsockname()[1]}"
t0 = time.monotonic()
try:
    shardstore.open("s3://bucket/data", storage_options=opts)
    outcome = "opened"
except Exception as e:
    outcome = f"{type(e).__name__}: {e}"
elapsed = time.monotonic() - t0
time.sleep(0.2)
print(json.dumps({"imds_connections": len(hits), "seconds": elapsed, "outcome": outcome}))
'''


def _netns_available() -> str | None:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return "unshare / ip not installed"
    r = subprocess.run(["unshare", "-n", "ip", "addr", "add", "169.254.169.254/32", "dev", "lo"],
                       capture_output=True, text=True, timeout=30, check=False)
    return None if r.returncode == 0 else f"cannot create a network namespace here: {r.stderr.strip()}"


def _probe(tmp_path: Path, options: dict[str, object]) -> dict[str, object]:
    import json

    env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    env["HOME"] = str(tmp_path)  # no ~/.aws
    r = subprocess.run(["unshare", "-n", sys.executable, "-c", _PROBE, json.dumps(options)], capture_output=True,
                       text=True, timeout=90, env=env, stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def netns() -> None:
    reason = _netns_available()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def test_no_credentials_never_contacts_instance_metadata(netns: None, tmp_path: Path) -> None:
    t0 = time.monotonic()
    got = _probe(tmp_path, {"max_retries": 0})
    assert got["imds_connections"] == 0, got
    assert got["seconds"] < 5, got  # no metadata lookups with retries before the first request
    outcome = str(got["outcome"])
    assert outcome.startswith("StoreError") or "ShardStoreError" in outcome or "Error" in outcome, outcome
    assert "no credentials were found" in outcome and "AWS_ACCESS_KEY_ID" in outcome, outcome
    assert time.monotonic() - t0 < 60


def test_positive_control_instance_metadata_when_asked(netns: None, tmp_path: Path) -> None:
    """The same probe sees the metadata endpoint contacted when that is asked for, so the
    zero above is a real zero."""
    got = _probe(tmp_path, {"max_retries": 0, "instance_metadata": True, "timeout": 3, "connect_timeout": 1})
    assert got["imds_connections"] >= 1, got

"""A real S3-compatible server for tests: moto in server mode, on 127.0.0.1, one per test process.

`s3_server` (session-scoped) starts moto's HTTP server in a thread on a port the OS picks (so
pytest-xdist workers, each its own process, each get their own), creates the bucket `S3_BUCKET`
and yields an `S3Server`: its endpoint and credentials, `settings(prefix)` for `override_settings`
(CTXENG_CONTENT_STORE and the S3 settings pointing at the server), and `client()`, a plain boto3
client for reading or writing objects behind the code's back. Starting takes ~0.5 s.

Use it from a test module with `from tests.s3server import s3_server  # noqa: F401`, or load
this module as a plugin (`pytest_plugins`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

S3_BUCKET = "ctxeng-content"


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    bucket: str
    access_key: str = "testing"
    secret_key: str = "testing"
    region: str = "us-east-1"

    def settings(self, prefix: str = "") -> dict[str, str]:
        store = f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"
        return {
            "CTXENG_CONTENT_STORE": store,
            "CTXENG_S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    # One log line per request otherwise, in every failing test's report.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        s3 = S3Server(endpoint_url=f"http://{host}:{port}", bucket=S3_BUCKET)
        s3.client().create_bucket(Bucket=s3.bucket)
        yield s3
    finally:
        server.stop()

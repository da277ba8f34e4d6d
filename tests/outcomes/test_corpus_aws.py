"""botocore's ``ClientError`` from a real local server answering AWS-style errors.

S3 (REST-XML) and DynamoDB (JSON) clients with fake credentials point at the corpus's
HTTP server, which answers the error code and status the key or table name asks for.
The AWS SDKs' own retry classification decides: throttling, transient and credential
codes are failures whatever their status; ``AccessDenied`` is authorization; other
codes follow their HTTP status (``NoSuchKey``/404 and ``ValidationException``/400 are
the caller's mistakes). Retries are off so each case is one request.
"""

from __future__ import annotations

import pytest
from corpus import caught, expect

from otel_breaker.outcome_rules import CONTROL, FAILURE, MISTAKE

botocore_session = pytest.importorskip("botocore.session", reason="botocore is not installed")
from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError, EndpointConnectionError  # noqa: E402

CONFIG = Config(
    retries={"max_attempts": 1, "mode": "standard"},
    connect_timeout=30,
    read_timeout=30,
    s3={"addressing_style": "path"},
)


@pytest.fixture(scope="module")
def session():
    """One botocore session: loading the service models is the slow part of a client."""
    return botocore_session.get_session()


def _client(session, service: str, endpoint: str):
    return session.create_client(
        service,
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="not-a-real-secret",
        config=CONFIG,
    )


S3_CASES = [
    ("NoSuchKey", 404, MISTAKE),
    ("NoSuchBucket", 404, MISTAKE),
    ("InvalidArgument", 400, MISTAKE),
    ("AccessDenied", 403, CONTROL),
    ("InternalError", 500, FAILURE),
    ("SlowDown", 503, FAILURE),
    ("InvalidAccessKeyId", 403, FAILURE),
    ("SignatureDoesNotMatch", 403, FAILURE),
]
DYNAMODB_CASES = [
    ("ValidationException", 400, MISTAKE),
    ("ResourceNotFoundException", 400, MISTAKE),
    ("ConditionalCheckFailedException", 400, MISTAKE),
    ("AccessDeniedException", 400, CONTROL),
    ("ThrottlingException", 400, FAILURE),
    ("ProvisionedThroughputExceededException", 400, FAILURE),
    ("UnrecognizedClientException", 400, FAILURE),
    ("InternalServerError", 500, FAILURE),
]


@pytest.mark.parametrize(("code", "status", "kind"), S3_CASES, ids=[f"{c}-{s}" for c, s, _ in S3_CASES])
def test_s3_error(code: str, status: int, kind: str, http_url: str, session) -> None:
    s3 = _client(session, "s3", http_url)
    exc = caught(s3.get_object, Bucket="reports", Key=f"{code}-{status}")
    assert isinstance(exc, ClientError), exc
    assert exc.response["Error"]["Code"] == code
    expect(exc, kind, f"aws.{code}")


@pytest.mark.parametrize(("code", "status", "kind"), DYNAMODB_CASES, ids=[f"{c}-{s}" for c, s, _ in DYNAMODB_CASES])
def test_dynamodb_error(code: str, status: int, kind: str, http_url: str, session) -> None:
    dynamodb = _client(session, "dynamodb", http_url)
    exc = caught(dynamodb.get_item, TableName=f"{code}-{status}", Key={"id": {"S": "42"}})
    assert isinstance(exc, ClientError), exc
    assert exc.response["Error"]["Code"] == code
    expect(exc, kind, f"aws.{code}")


def test_no_endpoint(dead_port: int, session) -> None:
    """No server at the endpoint: botocore's own connection error, not a ClientError."""
    s3 = _client(session, "s3", f"http://127.0.0.1:{dead_port}")
    exc = caught(s3.get_object, Bucket="reports", Key="daily.csv")
    assert isinstance(exc, EndpointConnectionError), exc
    expect(exc, FAILURE, "errno.ECONNREFUSED")

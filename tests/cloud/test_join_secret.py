"""The join program reads the munge key from SSM Parameter Store with the instance's own role,
signing the request itself (standard library only, as it runs on the image's Python).

moto's server runs in a process of its own with IAM enforcement on (INITIAL_NO_AUTH_ACTION_COUNT:
the first three calls make an administrator, every later one is authorised by its policies and
its signature is checked), so a request the program signs wrongly, or a role that may not read
the pool's parameter, is refused as AWS would refuse it.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from provisioner.testing.moto_faults import iam_enforcing_moto
from tests.unit.helpers import join_program

pytestmark = pytest.mark.aws

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's
PARAM = "/gpu-burst/burst-ctl/cloud-aws/munge-key"


@pytest.fixture
def enforcing_moto() -> Iterator[str]:
    with iam_enforcing_moto() as endpoint:
        yield endpoint


def client(endpoint: str, service: str, key: str, secret: str, token: str | None = None) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
    )


def role_creds(endpoint: str, admin: tuple[str, str], name: str, action: str) -> dict[str, str]:
    """A role EC2 may assume that may do `action`; its temporary credentials, as the instance
    metadata service hands them to an instance of its profile.

    moto evaluates every non-S3 action against the resource "*" (moto/core/authorization.py),
    so a policy scoped to one parameter's ARN would deny everything there: the policies here
    grant on "*", and what is shown is that a role without the action is refused. Scoping to
    the pool's own parameter is the field policy's job; moto cannot check it."""
    iam = client(endpoint, "iam", *admin)
    # EC2 assumes the role for an instance of its profile (the Service principal); the test
    # plays EC2, so the administrator may assume it too (moto checks only AWS principals)
    principal = {"Service": "ec2.amazonaws.com", "AWS": f"arn:aws:iam::{ACCOUNT}:user/admin"}
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}],
    }
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    read = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}],
    }
    iam.put_role_policy(RoleName=name, PolicyName="read-munge-key", PolicyDocument=json.dumps(read))
    got = client(endpoint, "sts", *admin).assume_role(RoleArn=arn, RoleSessionName="i-0abc")
    c = got["Credentials"]
    return {
        "AccessKeyId": c["AccessKeyId"],
        "SecretAccessKey": c["SecretAccessKey"],
        "Token": c["SessionToken"],
    }


def test_the_pools_role_reads_its_munge_key_and_another_role_is_refused(
    enforcing_moto: str,
) -> None:
    endpoint = enforcing_moto
    iam = client(endpoint, "iam", "testing", "testing")
    iam.create_user(UserName="admin")  # the three calls moto lets through unauthenticated
    everything = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
    }
    iam.put_user_policy(UserName="admin", PolicyName="admin", PolicyDocument=json.dumps(everything))
    k = iam.create_access_key(UserName="admin")["AccessKey"]
    admin = (k["AccessKeyId"], k["SecretAccessKey"])
    key = secrets.token_bytes(1024)
    client(endpoint, "ssm", *admin).put_parameter(
        Name=PARAM, Value=base64.b64encode(key).decode(), Type="SecureString"
    )
    pools_role = role_creds(endpoint, admin, "cloud-aws-node", "ssm:GetParameter")
    other_role = role_creds(endpoint, admin, "other-node", "ec2:DescribeInstances")
    join = join_program()

    assert join.ssm_parameter(endpoint, REGION, PARAM, pools_role) == key
    with pytest.raises(SystemExit, match="403") as refused:
        join.ssm_parameter(endpoint, REGION, PARAM, other_role)
    assert "AccessDenied" in str(refused.value)
    # A signature made with the wrong secret is refused too: moto checks it, as AWS does.
    forged = {**pools_role, "SecretAccessKey": "not-the-secret"}
    with pytest.raises(SystemExit, match=r"SignatureDoesNotMatch|403|400"):
        join.ssm_parameter(endpoint, REGION, PARAM, forged)

"""An EC2 instance metadata service (IMDSv2) stand-in for one test host, answering from moto.

Run inside the host's own network namespace, bound to 169.254.169.254:80 there
(`provisioner.testing.hosts`), so the host reaches it at the address a VM uses and this machine
never holds that address. Each answer is read from moto's record of this one instance
(DescribeInstances by id, over HTTP on the tests' /24), so what the VM learns is what the cloud
holds: its id, its private address and its tags (the controller's `slurm-node` among them).

As AWS documents it (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
configuring-instance-metadata-service.html, .../work-with-tags-in-IMDS.html):
- IMDSv2 only: `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` gives a
  session token; a read without a valid token is 401 (the launch template sets HttpTokens
  required);
- `/latest/meta-data/tags/instance/<key>` is 404 until the tag exists, and only when the
  instance has instance metadata tags on (its launch template's InstanceMetadataTags);
- `/latest/meta-data/iam/security-credentials/` names the role of the instance's profile, and
  `.../<role>` gives that role's temporary credentials (the stand-in assumes the role for the
  instance with sts:AssumeRole, as EC2 does; with moto's IAM enforcement on, the VM's requests
  are then authorised by that role's policy);
- `/latest/meta-data/spot/instance-action` and `.../events/recommendations/rebalance` are 404
  until EC2 warns the spot instance, then its notice (read from the moto fault layer's
  `GET /_spot/<id>`, see `spot_notices`);
- a missing path is 404.
Simplified: only the paths the node bootstrap reads; tokens never expire; no IMDSv1 fallback,
no hop limit (there is no container in between). moto does not copy a launch template's
MetadataOptions onto the instances an auto scaling group launches (AWS does), so the options
are read from the instance's group's launch template, as AWS would have applied them.
"""

from __future__ import annotations

import argparse
import http.server
import json
import secrets
import urllib.request
from typing import Any

from provisioner.testing.metadata_server import METADATA_ADDRESS, TextHandler, serve

TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"


CREDENTIALS = "/latest/meta-data/iam/security-credentials/"


class Imds:
    def __init__(
        self,
        ec2: Any,
        autoscaling: Any,
        instance_id: str,
        iam: Any = None,
        sts: Any = None,
        endpoint: str = "",
    ) -> None:
        self.endpoint = endpoint  # moto's server: the spot warnings come from its fault layer
        self.ec2 = ec2
        self.autoscaling = autoscaling
        self.iam = iam
        self.sts = sts
        self.instance_id = instance_id
        self.tokens: set[str] = set()

    def _template_data(self) -> dict[str, Any]:
        """The launch template data the instance's group launched it with (moto applies
        neither its MetadataOptions nor its IamInstanceProfile to the group's instances; AWS
        applies both)."""
        found = self.autoscaling.describe_auto_scaling_instances(InstanceIds=[self.instance_id])
        members = found["AutoScalingInstances"]
        template = members[0].get("LaunchTemplate") if members else None
        if not template:
            return {}
        versions = self.ec2.describe_launch_template_versions(
            LaunchTemplateId=template["LaunchTemplateId"], Versions=["$Default"]
        )["LaunchTemplateVersions"]
        return dict(versions[0]["LaunchTemplateData"]) if versions else {}

    def tags_enabled(self, inst: dict[str, Any]) -> bool:
        if inst.get("MetadataOptions", {}).get("InstanceMetadataTags") == "enabled":
            return True
        data = self._template_data()
        return bool(data.get("MetadataOptions", {}).get("InstanceMetadataTags") == "enabled")

    def role(self) -> str | None:
        """The role of the instance's profile (by name or ARN in the launch template)."""
        profile = self._template_data().get("IamInstanceProfile") or {}
        name = profile.get("Name") or str(profile.get("Arn", "")).rsplit("/", 1)[-1]
        if not name or self.iam is None:
            return None
        roles = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
        return str(roles[0]["RoleName"]) if roles else None

    def credentials(self, role: str) -> str | None:
        """The role's temporary credentials, as EC2 hands them to an instance of its profile
        (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-categories.html):
        the stand-in assumes the role for the instance, as EC2 does."""
        if role != self.role() or self.sts is None:
            return None
        arn = self.iam.get_role(RoleName=role)["Role"]["Arn"]
        c = self.sts.assume_role(RoleArn=arn, RoleSessionName=self.instance_id)["Credentials"]
        return json.dumps(
            {
                "Code": "Success",
                "Type": "AWS-HMAC",
                "AccessKeyId": c["AccessKeyId"],
                "SecretAccessKey": c["SecretAccessKey"],
                "Token": c["SessionToken"],
                "Expiration": c["Expiration"].isoformat(),
            }
        )

    def _instance(self) -> dict[str, Any]:
        res = self.ec2.describe_instances(InstanceIds=[self.instance_id])["Reservations"]
        inst: dict[str, Any] = res[0]["Instances"][0]
        return inst

    def spot(self, name: str) -> str | None:
        """The instance's spot notice `name` (instance_action, rebalance), or None (404)."""
        if not self.endpoint:
            return None
        url = f"{self.endpoint}/_spot/{self.instance_id}"
        with urllib.request.urlopen(url, timeout=5) as resp:  # the tests' /24 only
            found = json.loads(resp.read())
        value = found.get(name)
        return json.dumps(value) if value else None

    def answer(self, path: str) -> str | None:
        if path == "/latest/meta-data/spot/instance-action":
            return self.spot("instance_action")
        if path == "/latest/meta-data/events/recommendations/rebalance":
            return self.spot("rebalance")
        inst = self._instance()
        if path == "/latest/meta-data/instance-id":
            return self.instance_id
        if path == "/latest/meta-data/local-ipv4":
            return str(inst.get("PrivateIpAddress", ""))
        if path == CREDENTIALS:
            return self.role()
        if path.startswith(CREDENTIALS):
            return self.credentials(path[len(CREDENTIALS) :])
        if path.startswith("/latest/meta-data/tags/instance/"):
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
            value = tags.get(path.rsplit("/", 1)[1]) if self.tags_enabled(inst) else None
            return str(value) if value is not None else None
        return None


def handler_for(imds: Imds) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(TextHandler):
        def do_PUT(self) -> None:
            if self.path != "/latest/api/token" or not self.headers.get(TOKEN_TTL_HEADER):
                self.send_text(400, "Bad Request")
                return
            token = secrets.token_urlsafe(24)
            imds.tokens.add(token)
            self.send_text(200, token)

        def do_GET(self) -> None:
            if self.headers.get(TOKEN_HEADER) not in imds.tokens:
                self.send_text(401, "Unauthorized")
                return
            self.send_value(imds.answer(self.path))

    return Handler


def main(argv: list[str] | None = None) -> None:
    import boto3

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--instance", required=True)
    ap.add_argument("--endpoint", required=True, help="moto's server URL on the tests' /24")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--bind", default=METADATA_ADDRESS)
    ap.add_argument("--port", type=int, default=80)
    args = ap.parse_args(argv)
    ec2 = boto3.client("ec2", region_name=args.region, endpoint_url=args.endpoint)
    asg = boto3.client("autoscaling", region_name=args.region, endpoint_url=args.endpoint)
    iam = boto3.client("iam", region_name=args.region, endpoint_url=args.endpoint)
    sts = boto3.client("sts", region_name=args.region, endpoint_url=args.endpoint)
    imds = Imds(ec2, asg, args.instance, iam, sts, endpoint=args.endpoint)
    serve(handler_for(imds), args.bind, args.port)


if __name__ == "__main__":
    main()

"""A VM's serial console through each cloud's real client: EC2 GetConsoleOutput against moto's
server (base64 on the wire, the newest 64 KB) and GCE getSerialPortOutput against the fake; and
the join diagnosis that reads it when an instance is given up on."""

from __future__ import annotations

import pytest
from cloud_helpers import CONTROLLER, AwsEnv, GcpEnv, aws_spec, gcp_spec

from provisioner.act.join_diagnosis import JoinDiagnosis
from provisioner.act.ports import CloudPorts, request_token

FAILED = "[ 981.4] cloud-init[122]: gpu-burst-join: FAILED slurmd: slurmd did not start (failed)"


@pytest.mark.aws
def test_ec2_console_output_is_what_the_vm_wrote_its_newest_64_kb(aws: AwsEnv) -> None:
    spec = aws_spec()
    aws.driver.ensure(spec)
    aws.capacity.resize(spec, 1, request_token("up"))
    (inst,) = aws.capacity.list_owned(CONTROLLER)
    early = "booting\n" * 20_000  # 160 KB the cloud no longer keeps
    aws.server.serve_consoles(lambda iid: early + FAILED if iid == inst.instance_id else "")
    try:
        text = aws.capacity.console_output(inst)
        assert text.endswith(FAILED) and len(text.encode()) == 64 * 1024
        ports = CloudPorts(aws.driver, aws.capacity, console=aws.capacity)
        assert JoinDiagnosis({"aws": ports}).why(inst) == (
            "FAILED slurmd: slurmd did not start (failed)"
        )
    finally:
        aws.server.serve_consoles(None)


@pytest.mark.gcp
def test_gce_serial_port_output_is_what_the_vm_wrote(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.driver.ensure(spec)
    gce.capacity.resize(spec, 1, request_token("up"))
    (inst,) = gce.capacity.list_owned(CONTROLLER)
    said = {(inst.zone, inst.instance_id): "Debian GNU/Linux 12\n" + FAILED + "\n"}
    gce.fake.consoles = lambda zone, name: said.get((zone, name), "")
    assert gce.capacity.console_output(inst).endswith(FAILED + "\n")
    ports = CloudPorts(gce.driver, gce.capacity, console=gce.capacity)
    assert JoinDiagnosis({"gcp": ports}).why(inst).startswith("FAILED slurmd:")


def test_a_cloud_without_a_console_port_says_nothing(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.driver.ensure(spec)
    gce.capacity.resize(spec, 1, request_token("up"))
    (inst,) = gce.capacity.list_owned(CONTROLLER)
    assert JoinDiagnosis({"gcp": CloudPorts(gce.driver, gce.capacity)}).why(inst) == ""
    quiet = CloudPorts(gce.driver, gce.capacity, console=gce.capacity)
    assert JoinDiagnosis({"gcp": quiet}).why(inst) == "the console is empty"

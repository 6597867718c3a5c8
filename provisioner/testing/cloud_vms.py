"""The cloud stand-in's hypervisor: each instance moto or the GCE fake reports running becomes a
test host of its own (`provisioner.testing.hosts`), booted from the user-data that stand-in
recorded for that instance, with the instance id and private address it gave; an instance the
stand-in no longer reports running loses its host (halted, its namespace removed).

This is what a cloud does between the controller's API call and the VM's first packet, and
nothing more: the controller is not told anything here. The VM learns who it is from its own
metadata stand-in (a sidecar in its namespace), as a real VM does.

Simplified: a VM boots the moment the stand-in lists it (a real one takes 30-90 s), and its
private address must lie on the tests' /24 (the pool's subnet is created there).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.testing import hosts

_ANSI = re.compile(r"\x1b\[[0-9;:]*m")
# Console lines that tell how far a boot got, and when.
_MILESTONE = re.compile(
    r"running '[a-z:-]+' at|gpu-burst-join|Started .*(munge|slurmd)|FAILED|Traceback|error"
    r"|Failed (?!to create symlink|to attach|generating key)"
)


@dataclass(frozen=True, slots=True)
class RunningVm:
    """One running instance as its cloud stand-in records it."""

    instance_id: str  # what the VM's metadata calls it (GCE: the numeric id)
    private_ip: str
    hostname: str  # GCE: the instance's name
    user_data: str
    zone: str = ""


Lister = Callable[[], Sequence[RunningVm]]
Sidecar = Callable[[RunningVm], Sequence[str]]


class CloudVms:
    """`sync()` boots a host for every listed instance that has none and stops the host of every
    instance no longer listed. `newest_first`: instances listed together boot in the reverse of
    the stand-in's order (both boot orders are tested)."""

    def __init__(
        self,
        root: Path,
        workdir: Path,
        lister: Lister,
        sidecar: Sidecar,
        *,
        files: Mapping[str, str] | None = None,
        newest_first: bool = False,
        user_data: Callable[[str], str] | None = None,
    ) -> None:
        self.root = root
        self.workdir = workdir
        self.lister = lister
        self.sidecar = sidecar
        self.files = dict(files or {})
        self.newest_first = newest_first
        # what boots instead of the recorded user-data (a test's broken site template)
        self.user_data = user_data
        self._by_name: dict[tuple[str, str], str] = {}  # (zone, GCE name) -> instance id
        self.running: dict[str, hosts.TestHost] = {}  # instance id -> its host
        self.booted: list[str] = []  # instance ids, in the order their hosts booted
        self.stopped: list[str] = []
        self.consoles: dict[str, Path] = {}  # instance id -> its boot log, kept once it stops
        self.boot_times: dict[str, str] = {}  # instance id -> when its host booted (UTC)

    def sync(self) -> None:
        listed = list(self.lister())
        ids = {vm.instance_id for vm in listed}
        for iid in [i for i in self.running if i not in ids]:
            self.running.pop(iid).stop()
            self.stopped.append(iid)
        new = [vm for vm in listed if vm.instance_id not in self.running]
        for vm in reversed(new) if self.newest_first else new:
            self.running[vm.instance_id] = self._boot(vm)
            self.booted.append(vm.instance_id)
            self.consoles[vm.instance_id] = self.running[vm.instance_id].console
            self.boot_times[vm.instance_id] = time.strftime("%H:%M:%S", time.gmtime())

    def _boot(self, vm: RunningVm) -> hosts.TestHost:
        net, _, octet = vm.private_ip.rpartition(".")
        if net != hosts.SUBNET:
            raise hosts.HostError(
                f"{vm.instance_id}: private address {vm.private_ip} is not on {hosts.SUBNET}.0/24"
            )
        user_data = self.user_data(vm.user_data) if self.user_data else vm.user_data
        spec = hosts.HostSpec(vm.instance_id, vm.hostname, int(octet), user_data)
        self._by_name[(vm.zone, vm.hostname)] = vm.instance_id
        host = hosts.TestHost(spec, self.root, self.workdir, self.sidecar(vm), self.files)
        return host.boot()

    def boot_story(self) -> dict[str, list[str]]:
        """instance id -> the milestones of its boot (cloud-init's stages with their times, the
        join program's words, slurmd's start, failures): why a VM joined late or not at all."""
        out: dict[str, list[str]] = {}
        for iid, console in self.consoles.items():
            text = console.read_text(errors="replace") if console.exists() else ""
            seen = [
                line.strip()[-160:]
                for line in _ANSI.sub("", text).splitlines()
                if _MILESTONE.search(line)
            ]
            out[iid] = [f"booted {self.boot_times.get(iid, '?')} UTC", *seen[-20:]]
        return out

    def console(self, instance_id: str) -> str:
        """What the instance's VM wrote to its serial console so far ("" before it booted):
        what the cloud stand-ins answer GetConsoleOutput / getSerialPortOutput with."""
        path = self.consoles.get(instance_id)
        return path.read_text(errors="replace") if path is not None and path.exists() else ""

    def console_by_name(self, zone: str, name: str) -> str:
        return self.console(self._by_name.get((zone, name), ""))

    def host_of(self, instance_id: str) -> hosts.TestHost:
        return self.running[instance_id]

    def close(self) -> None:
        for host in self.running.values():
            host.stop()
        self.running.clear()


def moto_lister(ec2: Any, controller: str, tag_key: str = "controller") -> Lister:
    """Running instances of `controller` in moto (boto3 EC2 client), oldest launch first."""

    def listed() -> list[RunningVm]:
        res = ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{tag_key}", "Values": [controller]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )
        found = [i for r in res["Reservations"] for i in r["Instances"]]
        found.sort(key=lambda i: (i["LaunchTime"], i["InstanceId"]))
        out = []
        for inst in found:
            iid = inst["InstanceId"]
            attr = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
            raw = attr.get("UserData", {}).get("Value", "")
            ip = inst.get("PrivateIpAddress", "")
            out.append(
                RunningVm(
                    iid,
                    ip,
                    f"ip-{ip.replace('.', '-')}",
                    base64.b64decode(raw).decode() if raw else "",
                )
            )
        return out

    return listed


def gce_lister(fake: Any, project: str) -> Lister:
    """Running instances in the GCE fake (its own records, read in-process: the hypervisor is
    part of the stand-in), in creation order."""

    def listed() -> list[RunningVm]:
        out = []
        for (zone, name), inst in sorted(
            list(fake.instances.items()), key=lambda kv: int(kv[1]["id"])
        ):
            if inst.get("status") != "RUNNING" or f"/projects/{project}/" not in inst["zone"]:
                continue
            items = {i["key"]: i["value"] for i in inst.get("metadata", {}).get("items", [])}
            ip = inst["networkInterfaces"][0]["networkIP"]
            out.append(RunningVm(str(inst["id"]), ip, name, items.get("user-data", ""), zone))
        return out

    return listed


def gce_metadata_sidecar(python: str, endpoint: str, project: str) -> Sidecar:
    """The GCE metadata stand-in for one VM, answering from the GCE fake at `endpoint`."""

    def command(vm: RunningVm) -> list[str]:
        return [
            python,
            "-m",
            "provisioner.testing.gce_metadata",
            "--endpoint",
            endpoint,
            "--project",
            project,
            "--zone",
            vm.zone,
            "--instance",
            vm.hostname,
        ]

    return command


def imds_sidecar(python: str, endpoint: str, region: str) -> Sidecar:
    """The AWS metadata stand-in for one VM, answering from moto at `endpoint`."""

    def command(vm: RunningVm) -> list[str]:
        return [
            python,
            "-m",
            "provisioner.testing.imds",
            "--instance",
            vm.instance_id,
            "--endpoint",
            endpoint,
            "--region",
            region,
        ]

    return command


def _slurmd_exec(root: Path) -> str:
    for unit in (
        root / "lib/systemd/system/slurmd.service",
        root / "usr/lib/systemd/system/slurmd.service",
    ):
        if unit.exists():
            for line in unit.read_text().splitlines():
                if line.startswith("ExecStart=/"):
                    return line.removeprefix("ExecStart=")
    raise hosts.HostError(f"{root}: no slurmd.service with an ExecStart")


def host_files(root: Path, munge_socket: str, gpus: int) -> dict[str, str]:
    """What a test host needs that a VM of the field has by itself, placed by systemd-tmpfiles
    at boot (never a secret):
    - the socket path the test cluster's slurm.conf names in AuthInfo (that munged is private
      to the cluster, on a machine shared with others), linked to the host's own munged;
    - /dev/nvidia0.. linked to /dev/null, as the machine's own test clusters fake GPUs: the
      node's gres.conf (from slurmctld, configless) names them;
    - slurmd started with -b (the root's own unit's command, plus -b): a container shares
      this machine's kernel, so its boot time is the machine's, and slurmctld would wait for
      a boot that happened long before the power-up; a VM reports its own fresh boot."""
    lines = [f"d {munge_socket.rsplit('/', 1)[0]} 0755 root root -"]
    lines.append(f"L+ {munge_socket} - - - - /run/munge/munge.socket.2")
    lines += [f"L /dev/nvidia{i} - - - - /dev/null" for i in range(gpus)]
    program, _, args = _slurmd_exec(root).partition(" ")
    return {
        "/etc/tmpfiles.d/gpu-burst-test-host.conf": "\n".join(lines) + "\n",
        "/etc/systemd/system/slurmd.service.d/test-host-boot.conf": (
            f"[Service]\nExecStart=\nExecStart={program} -b {args}\n"
        ),
    }

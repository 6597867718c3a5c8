"""Test hosts: each burst instance booted as a host of its own on this machine, the way a VM
boots (see ../shared/notes/test-hosts.md).

A host is a Debian root (`scripts/test-host-root.sh`) booted by `systemd-nspawn` with systemd as
PID 1, inside a network namespace of its own, its writes on a tmpfs overlay (one root serves
many hosts and stays clean). Real cloud-init reads a NoCloud seed: `meta-data` (the instance id
and hostname the cloud stand-in gave it) and `user-data` (exactly what the stand-in recorded).

The network is one private /24 that the tests own (`SUBNET`): a bridge on this machine holds
its first address, and each host's veth joins the bridge. Nothing routes it: no host has a
default route, the bridge has no other port, so a host reaches the servers bound to
`HOST_ADDRESS` and nothing else. Each host's namespace also holds 169.254.169.254 (on its
loopback), for its own metadata stand-in: that address is never put on this machine.

Every name the harness makes starts with `PREFIX`, so `clean_leftovers()` (and
`make test-hosts-clean`) can remove what a killed test run left: nspawn processes, namespaces,
links. Needs root, `systemd-nspawn` (systemd-container), `ip` and `nsenter`.

Simplified against a cloud VM: no DHCP (the address is set from outside before boot), no disk
of its own (an overlay of a shared root), no kernel of its own (a container).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.domain.errors import ProvisionerError

PREFIX = "gbt"
SUBNET = "10.77.0"  # 10.77.0.0/24, owned by the tests, never routed
HOST_ADDRESS = f"{SUBNET}.1"  # this machine's address on the test network (the bridge's)
BRIDGE = f"{PREFIX}br0"
METADATA_ADDRESS = "169.254.169.254"  # inside each host's namespace only
FIRST_HOST_OCTET = 4  # .0-.3 are reserved (as AWS reserves them in a subnet)
_STOP_TIMEOUT_S = 30.0


class HostError(ProvisionerError):
    """A test host could not be made, booted or removed as asked."""


def _run(*cmd: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise HostError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[:500]}")
    return out


def available() -> str:
    """Why test hosts cannot run here ("" when they can)."""
    if os.geteuid() != 0:
        return "test hosts need root (network namespaces, systemd-nspawn)"
    for tool in ("systemd-nspawn", "ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (make test installs it: scripts/test-host-root.sh)"
    return ""


# --------------------------------------------------------------------------- the network


def network_up() -> None:
    """The bridge holding `HOST_ADDRESS`/24 (made once; kept while hosts come and go)."""
    if _run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
    addrs = _run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f"{HOST_ADDRESS}/24" not in addrs:
        _run("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")


def network_down() -> None:
    _run("ip", "link", "del", BRIDGE, check=False)


# --------------------------------------------------------------------------- one host


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One instance as its cloud stand-in knows it."""

    instance_id: str
    hostname: str
    octet: int  # its address is SUBNET.octet
    user_data: str
    extra_meta: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.octet}"

    @property
    def machine(self) -> str:
        return f"{PREFIX}-h{self.octet}"


def _meta_data(spec: HostSpec) -> str:
    lines = [f"instance-id: {spec.instance_id}", f"local-hostname: {spec.hostname}"]
    lines += [f"{k}: {v}" for k, v in sorted(spec.extra_meta.items())]
    return "\n".join(lines) + "\n"


class TestHost:
    """A booted host. `out` is a folder of this machine bound at /mnt/out inside it, for what
    the host's programs report back; `console` is its boot log."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        spec: HostSpec,
        root: Path,
        workdir: Path,
        sidecar: Sequence[str] = (),
        files: Mapping[str, str] | None = None,
    ) -> None:
        if not FIRST_HOST_OCTET <= spec.octet <= 250:
            raise HostError(f"host octet {spec.octet} is outside {FIRST_HOST_OCTET}..250")
        self.spec = spec
        self.root = root
        self.dir = workdir / spec.machine
        self.out = self.dir / "out"
        self.console = self.dir / "console.log"
        self.netns = spec.machine
        self.proc: subprocess.Popen[bytes] | None = None
        # A program run in the host's namespace (not inside the host): its metadata stand-in.
        self.sidecar = tuple(sidecar)
        self.sidecar_proc: subprocess.Popen[bytes] | None = None
        # Files placed read-only in the host (path inside -> text): what the test machine
        # differs in from a VM (e.g. where the test cluster's munged listens), never a secret.
        self.files = dict(files or {})

    # ------------------------------------------------------------------ life

    def boot(self) -> TestHost:
        if not (self.root / ".provisioner-root").exists():
            raise HostError(f"{self.root}: no test-host root here (scripts/test-host-root.sh)")
        seed = self.dir / "seed"
        seed.mkdir(parents=True, exist_ok=True)
        self.out.mkdir(exist_ok=True)
        (seed / "meta-data").write_text(_meta_data(self.spec))
        (seed / "user-data").write_text(self.spec.user_data)
        binds = []
        for i, (inside, text) in enumerate(sorted(self.files.items())):
            if not inside.startswith("/"):
                raise HostError(f"{self.spec.machine}: file path {inside!r} is not absolute")
            (self.dir / f"file-{i}").write_text(text)
            binds.append(f"--bind-ro={self.dir / f'file-{i}'}:{inside}")
        try:
            self._namespace_up()
            if self.sidecar:
                with (self.dir / "sidecar.log").open("wb") as log:
                    self.sidecar_proc = subprocess.Popen(
                        ["ip", "netns", "exec", self.netns, *self.sidecar],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
        except HostError:
            self.stop()  # what was made of the namespace so far
            raise
        with self.console.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    "systemd-nspawn",
                    "--quiet",
                    "-D",
                    str(self.root),
                    "-M",
                    self.spec.machine,
                    "--boot",
                    "--register=no",
                    "--keep-unit",
                    "--volatile=overlay",
                    f"--network-namespace-path=/run/netns/{self.netns}",
                    f"--bind-ro={seed}:/var/lib/cloud/seed/nocloud",
                    f"--bind={self.out}:/mnt/out",
                    *binds,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def _namespace_up(self) -> None:
        ns, octet = self.netns, self.spec.octet
        outside, inside = f"{PREFIX}v{octet}", f"{PREFIX}p{octet}"
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", outside, "master", BRIDGE, "up")
        _run("ip", "link", "set", inside, "netns", ns)
        _run("ip", "-n", ns, "link", "set", inside, "name", "eth0")
        _run("ip", "-n", ns, "addr", "add", f"{self.spec.address}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        # The metadata stand-in's address, on this host's own loopback (the kernel here has
        # no dummy interfaces): reachable from inside the host only.
        _run("ip", "-n", ns, "addr", "add", f"{METADATA_ADDRESS}/32", "dev", "lo")

    def stop(self) -> None:
        """Halt the host cleanly (SIGTERM to nspawn), then remove its namespace and veth."""
        side, self.sidecar_proc = self.sidecar_proc, None
        if side is not None and side.poll() is None:
            os.killpg(side.pid, signal.SIGKILL)
            side.wait(timeout=10)
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        _run("ip", "netns", "del", self.netns, check=False)
        _run("ip", "link", "del", f"{PREFIX}v{self.spec.octet}", check=False)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ------------------------------------------------------------------ looking inside

    def wait_for(self, name: str, deadline_s: float = 60.0) -> str:
        """The text of `out/name` once the host has written it (polled: a real boot)."""
        path = self.out / name

        def read() -> str:
            return path.read_text() if path.exists() else ""

        return self._poll(name, read, deadline_s, 0.1)

    def wait_inside(self, path: str, deadline_s: float = 60.0) -> str:
        """The text of `path` inside the host once it is there (polled: a real boot)."""

        def read() -> str:
            with contextlib.suppress(HostError, OSError, ValueError):
                out = self.exec("cat", path, timeout=10)
                if out.returncode == 0:
                    return out.stdout
            return ""

        return self._poll(path, read, deadline_s, 0.2)

    def wait_systemd(self, deadline_s: float = 60.0) -> str:
        """systemd's state inside once it answers on its bus (`starting` or later): until
        then a `systemctl` in the host fails ("not booted with systemd", "Host is down")."""

        def read() -> str:
            with contextlib.suppress(HostError, OSError, ValueError):
                state = self.exec("systemctl", "is-system-running", timeout=10).stdout.strip()
                if state in ("starting", "running", "degraded"):
                    return state
            return ""

        return self._poll("systemd", read, deadline_s, 0.2)

    def _poll(self, what: str, read: Callable[[], str], deadline_s: float, every_s: float) -> str:
        """`read()` until it gives text, while the host runs, for at most `deadline_s`."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            text = read()
            if text:
                return text
            if not self.running:
                raise HostError(f"{self.spec.machine} stopped before {what}: {self.tail()}")
            time.sleep(every_s)
        raise HostError(f"{self.spec.machine}: no {what} after {deadline_s:.0f} s: {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        text = self.console.read_text(errors="replace") if self.console.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def init_pid(self) -> int:
        """The host's PID 1 (systemd), as this machine numbers it."""
        if self.proc is None:
            raise HostError(f"{self.spec.machine} is not booted")
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        pids = children.split()
        if not pids:
            raise HostError(f"{self.spec.machine}: nspawn has no child yet")
        return int(pids[0])

    def exec(self, *cmd: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a command inside the host (all its namespaces), as root there."""
        return _run("nsenter", "-t", str(self.init_pid()), "-a", *cmd, check=False, timeout=timeout)


# --------------------------------------------------------------------------- many hosts


@contextlib.contextmanager
def hosts(
    specs: Sequence[HostSpec],
    root: Path,
    workdir: Path | None = None,
    sidecar: Callable[[HostSpec], Sequence[str]] | None = None,
    files: Mapping[str, str] | None = None,
) -> Iterator[list[TestHost]]:
    """Boot every host of `specs` (in that order) and remove them all afterwards, whatever
    happened in between. `sidecar(spec)`: a program to run in each host's namespace first;
    `files`: placed read-only in every host."""
    network_up()
    tmp = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-")) if workdir is None else workdir
    booted: list[TestHost] = []
    try:
        for spec in specs:
            side = sidecar(spec) if sidecar is not None else ()
            booted.append(TestHost(spec, root, tmp, side, files).boot())
        yield booted
    finally:
        for h in booted:
            h.stop()
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _processes() -> Iterator[tuple[int, list[str]]]:
    """Every process's pid and argv, from /proc: `ps` cuts its lines to $COLUMNS when set."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if args:
            yield int(entry.name), args


def clean_leftovers(*, network: bool = True) -> list[str]:
    """Remove every nspawn process, namespace and link a test run left (by `PREFIX`); the
    bridge too unless `network` is False."""
    removed: list[str] = []
    for pid, argv in _processes():
        machine = argv[argv.index("-M") + 1] if "-M" in argv[:-1] else ""
        if Path(argv[0]).name == "systemd-nspawn" and machine.startswith(f"{PREFIX}-"):
            # The host's PID 1 first: killing nspawn alone leaves the host's systemd (and all
            # it runs) alive, reparented to this machine's init. Killing a PID namespace's
            # init ends every process in it.
            for init in _children(int(pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init, signal.SIGKILL)
                removed.append(f"host init {init}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid}")
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"{PREFIX}-"):
            _run("ip", "netns", "del", name, check=False)
            removed.append(f"netns {name}")
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if name.startswith(PREFIX) and (network or name != BRIDGE):
            _run("ip", "link", "del", name, check=False)
            removed.append(f"link {name}")
    return removed


if __name__ == "__main__":  # python -m provisioner.testing.hosts: make test-hosts-clean
    for what in clean_leftovers():
        print(f"removed {what}")

#!/usr/bin/python3
"""Join this VM to the Slurm cluster as the node the controller bound it to.

Written to /usr/local/sbin/gpu-burst-join by the node bootstrap (cloud-init) and run once at
first boot. Standard library only (Python 3.9 to 3.13): it runs on the image's own Python.

1. Reads /etc/gpu-burst/node.json: the controller's address, the cloud, the tag that names the
   node. Nothing secret is in it (user-data is readable by whoever may describe the instance).
2. Asks this instance's own metadata service who it is (AWS IMDSv2 / the GCE metadata server)
   and waits until the controller has named its node there: a per-instance tag (AWS, with
   instance metadata tags on) or instance attribute (GCE). The controller names a node only for
   an instance it bought, after setting that node's NodeAddr to this instance's private address,
   so the name speaks for this one instance; the hostname proves nothing.
3. Puts the munge key in place, never an empty one: read from the cloud's secret store with
   this instance's own identity (AWS SSM Parameter Store with its instance profile's role,
   GCP Secret Manager with its service account's token), printed by a command, or already in
   the image.
   Where node.json names a MIG layout (a MIG pool), turns MIG mode on and cuts every GPU
   into that layout with nvidia-smi, so slurmd declares the devices as GRES.
4. Checks slurmctld answers TCP from here, starts munged, then slurmd in configless mode as
   that node (`slurmd -N <node> --conf-server`), and watches it for a while: a slurmd that
   exits, or whose key slurmctld refuses, fails the join with slurmd's own words.
5. Where node.json names the controller's API, starts the spot watcher (gpu-burst-watch) as
   a systemd unit that restarts it if it dies, and asks the controller for the GPU agent's
   token with a MUNGE credential (POST /v1/nodes/<node>/agent-token): the token is bound to
   this node, ends with this instance, and is written to /etc/gpu-burst/agent.token (0600),
   never carried in user-data.
6. Where node.json names where the GPU agent's wheels are, installs the agent in a venv of its
   own (/opt/gpu-burst-agent: this project's wheel without the controller's dependencies, then
   the agent's) and runs it as a systemd unit, as this node, pushing to the controller's API
   with that token. /etc/default/gpu-burst-agent, where the image has one, adds to its
   environment.

What it learnt is written to /run/gpu-burst/joined.json. Exit status 0 once slurmd was started.
A step that fails prints `gpu-burst-join: FAILED <step>: <why>` (on the serial console, where
the controller reads it when it gives up on the VM) and exits 1.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

CONFIG = "/etc/gpu-burst/node.json"
METADATA = os.environ.get("GPU_BURST_METADATA", "http://169.254.169.254")
MUNGE_KEY = "/etc/munge/munge.key"
STATE = "/run/gpu-burst/joined.json"
AGENT_TOKEN = "/etc/gpu-burst/agent.token"
AGENT_ENV = "/etc/gpu-burst/agent.env"
AGENT_VENV = "/opt/gpu-burst-agent"
# Debian's slurmd unit starts only with /etc/slurm/slurm.conf in place
# (ConditionPathExists); in configless mode the config comes from slurmctld instead.
SLURMD_DROPIN = "/etc/systemd/system/slurmd.service.d/gpu-burst-configless.conf"
SLURMD_CONF_CACHE = "/run/slurm/conf/slurm.conf"  # where configless slurmd keeps its config


def log(msg: str) -> None:
    print(f"gpu-burst-join: {msg}", file=sys.stderr, flush=True)


def get(path: str, headers: dict[str, str], method: str = "GET") -> str | None:
    """One metadata read; None for a 404 (not set yet)."""
    req = urllib.request.Request(METADATA + path, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return str(resp.read().decode().strip())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


class Aws:
    """IMDSv2: a session token first, then reads that carry it."""

    def __init__(self) -> None:
        token = get(
            "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "600"}, method="PUT"
        )
        self.headers = {"X-aws-ec2-metadata-token": token or ""}

    def get(self, path: str) -> str | None:
        return get(path, self.headers)

    def instance_id(self) -> str | None:
        return get("/latest/meta-data/instance-id", self.headers)

    def address(self) -> str | None:
        return get("/latest/meta-data/local-ipv4", self.headers)

    def node(self, key: str) -> str | None:
        return get(f"/latest/meta-data/tags/instance/{key}", self.headers)


class Gcp:
    """The GCE metadata server: every read carries Metadata-Flavor: Google."""

    def __init__(self) -> None:
        self.headers = {"Metadata-Flavor": "Google"}

    def instance_id(self) -> str | None:
        return get("/computeMetadata/v1/instance/id", self.headers)

    def address(self) -> str | None:
        return get("/computeMetadata/v1/instance/network-interfaces/0/ip", self.headers)

    def node(self, key: str) -> str | None:
        return get(f"/computeMetadata/v1/instance/attributes/{key}", self.headers)

    def name(self) -> str | None:
        """The instance's name: what the controller knows a GCE VM by."""
        return get("/computeMetadata/v1/instance/name", self.headers)

    def token(self) -> str:
        """An OAuth access token for the service account this VM runs as."""
        doc = get("/computeMetadata/v1/instance/service-accounts/default/token", self.headers)
        if not doc:
            raise SystemExit("gpu-burst-join: this instance runs as no service account")
        return str(json.loads(doc)["access_token"])


# --------------------------------------------------------------------------- secrets
# The munge key comes from the cloud's secret store, read with this instance's own identity
# (its instance profile's role / its service account), never from user-data.


def aws_credentials(meta: Aws) -> dict[str, str]:
    """The instance profile role's temporary credentials, from IMDS."""
    base = "/latest/meta-data/iam/security-credentials/"
    role = meta.get(base)
    if not role:
        raise SystemExit("gpu-burst-join: this instance has no instance profile (no role in IMDS)")
    doc = json.loads(meta.get(base + role.splitlines()[0]) or "{}")
    return {k: str(doc[k]) for k in ("AccessKeyId", "SecretAccessKey", "Token")}


def sigv4(
    creds: dict[str, str],
    region: str,
    service: str,
    host: str,
    headers: dict[str, str],
    body: bytes,
    now: datetime.datetime | None = None,
) -> dict[str, str]:
    """Signature Version 4 for a POST to `/` (AWS's JSON protocols), as AWS documents it
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html)."""
    t = now or datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 (runs on 3.9)
    amz_date, day = t.strftime("%Y%m%dT%H%M%SZ"), t.strftime("%Y%m%d")
    signed = {**{k.lower(): v for k, v in headers.items()}, "host": host, "x-amz-date": amz_date}
    if creds.get("Token"):
        signed["x-amz-security-token"] = creds["Token"]
    names = sorted(signed)
    canonical = "\n".join(
        [
            "POST",
            "/",
            "",
            "".join(f"{n}:{signed[n].strip()}\n" for n in names),
            ";".join(names),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = ("AWS4" + creds["SecretAccessKey"]).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    auth = (
        f"AWS4-HMAC-SHA256 Credential={creds['AccessKeyId']}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={sig}"
    )
    return {**signed, "authorization": auth}


def ssm_parameter(endpoint: str, region: str, name: str, creds: dict[str, str]) -> bytes:
    """A SecureString parameter's value (the munge key, base64), decrypted, read with `creds`."""
    body = json.dumps({"Name": name, "WithDecryption": True}).encode()
    host = urllib.parse.urlparse(endpoint).netloc
    headers = sigv4(
        creds,
        region,
        "ssm",
        host,
        {
            "content-type": "application/x-amz-json-1.1",
            "x-amz-target": "AmazonSSM.GetParameter",
        },
        body,
    )
    req = urllib.request.Request(endpoint + "/", data=body, headers=headers, method="POST")
    value = secret_answer(req, f"SSM GetParameter {name}")["Parameter"]["Value"]
    return base64.b64decode(value)


def secret_answer(req: urllib.request.Request, what: str) -> dict:  # type: ignore[type-arg]
    """A secret store's JSON answer; a refusal ends the join with the store's own words."""
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return dict(json.load(resp))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise SystemExit(f"gpu-burst-join: {what}: {exc.code} {detail}") from None


def gcp_secret(endpoint: str, name: str, token: str) -> bytes:
    """A Secret Manager secret version's payload (`name`: projects/P/secrets/S/versions/V),
    read with this VM's service account's token."""
    req = urllib.request.Request(
        f"{endpoint}/v1/{name}:access", headers={"Authorization": f"Bearer {token}"}
    )
    return base64.b64decode(secret_answer(req, f"Secret Manager {name}")["payload"]["data"])


def wait_for_node(meta: Aws | Gcp, key: str, deadline_s: float, poll_s: float) -> str:
    end = time.monotonic() + deadline_s
    while True:
        try:
            node = meta.node(key)
        except OSError as exc:  # the metadata service not answering yet
            log(f"metadata: {exc}")
            node = None
        if node:
            return node
        if time.monotonic() >= end:
            raise SystemExit(f"gpu-burst-join: no node named for this instance in {deadline_s} s")
        time.sleep(poll_s)


def write_munge_key(key: bytes, where: str) -> None:
    if len(key) < 32:
        raise SystemExit(f"gpu-burst-join: the munge key from {where} has {len(key)} bytes")
    tmp = MUNGE_KEY + ".new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    subprocess.run(["chown", "munge:munge", tmp], check=True)
    os.replace(tmp, MUNGE_KEY)  # never a half-written or empty key in place


def install_munge_key(cfg: dict, meta: Aws | Gcp) -> None:  # type: ignore[type-arg]
    """The key from the cloud's secret store (read with this instance's own identity), from
    a command, or already in the image."""
    source = cfg.get("munge_key") or {}
    if source.get("source") == "ssm" and isinstance(meta, Aws):
        key = ssm_parameter(
            source["endpoint"], source["region"], source["name"], aws_credentials(meta)
        )
        write_munge_key(key, f"SSM parameter {source['name']}")
        return
    if source.get("source") == "gcp-secret" and isinstance(meta, Gcp):
        key = gcp_secret(source["endpoint"], source["name"], meta.token())
        write_munge_key(key, f"Secret Manager {source['name']}")
        return
    command = cfg.get("munge_key_command", "")
    if not command:  # the image holds the key
        if not os.path.exists(MUNGE_KEY) or os.path.getsize(MUNGE_KEY) == 0:
            raise SystemExit("gpu-burst-join: no munge key in the image and no command for one")
        return
    key = subprocess.run(["/bin/sh", "-c", command], capture_output=True, check=True).stdout
    write_munge_key(key, "the munge key command")


def write_private(path: str, text: str) -> None:
    """`text` at `path`, readable by root only, never half-written."""
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def start_agent(agent: dict, api: str, node: str, token: str) -> bool:  # type: ignore[type-arg]
    """Install the GPU agent from the wheels node.json names and run it as this node; False
    (logged) when it could not be installed: the node serves jobs all the same."""
    pip = [f"{AGENT_VENV}/bin/python", "-m", "pip", "install", "--quiet", "--no-index"]
    pip += ["--disable-pip-version-check", "--find-links", agent["wheels"]]
    where = urllib.parse.urlparse(agent["wheels"])
    if where.scheme == "http":  # pip ignores a plain-http host unless told: the policy named it
        pip += ["--trusted-host", where.hostname or ""]
    try:
        venv = ["/usr/bin/python3", "-m", "venv", AGENT_VENV]
        subprocess.run(venv, check=True, capture_output=True)
        subprocess.run([*pip, "--no-deps", agent["package"]], check=True, capture_output=True)
        subprocess.run([*pip, *agent["requirements"]], check=True, capture_output=True)
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or b"").decode(errors="replace")[-500:]
        log(f"agent not installed: {' '.join(map(str, exc.cmd))[:200]}: {said}")
        return False
    write_private(AGENT_ENV, f"PROVISIONER_AGENT_TOKEN={token}\n")
    unit = ["--unit=gpu-burst-agent", "--property=Restart=always", "--property=RestartSec=5"]
    unit += [f"--property=EnvironmentFile={AGENT_ENV}"]
    unit += ["--property=EnvironmentFile=-/etc/default/gpu-burst-agent"]
    run = [f"{AGENT_VENV}/bin/python", "-m", "provisioner.agent.cli", "--controller", api]
    run += ["--node", node, "--listen", "off", "--interval", str(agent.get("interval_s", 15))]
    subprocess.run(["systemd-run", *unit, *run], check=True)
    log(f"agent started as node {node}")
    return True


def fetch_agent_token(api: str, node: str, ident: str, deadline_s: float, poll_s: float) -> str:
    """The GPU agent's token from the controller, for this node's own MUNGE proof; "" when
    none came by the deadline (the node serves jobs all the same). The controller checks the
    request came from the node's NodeAddr, which it may set a pass after naming the node."""
    payload = json.dumps({"node": node, "instance_id": ident, "purpose": "agent-token"})
    url = f"{api.rstrip('/')}/v1/nodes/{node}/agent-token"
    end = time.monotonic() + deadline_s
    while True:
        try:
            cred = subprocess.run(
                ["munge", "-s", payload], capture_output=True, check=True, text=True
            ).stdout.strip()
            body = json.dumps({"credential": cred}).encode()
            req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                token = str(json.load(resp)["token"])
            write_private(AGENT_TOKEN, token + "\n")
            log(f"agent token in place ({AGENT_TOKEN})")
            return token
        except urllib.error.HTTPError as exc:
            log(f"agent token refused: {exc.code} {exc.read().decode(errors='replace')[:300]}")
        except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:
            log(f"agent token: {exc}")
        if time.monotonic() >= end:
            return ""
        time.sleep(poll_s)


def connect(cloud: str, deadline_s: float, poll_s: float) -> Aws | Gcp:
    """The metadata service, once it answers (it may come up after this program starts)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            meta: Aws | Gcp = Aws() if cloud == "aws" else Gcp()
            if meta.instance_id():
                return meta
        except OSError as exc:
            log(f"metadata: {exc}")
        if time.monotonic() >= end:
            raise SystemExit(f"gpu-burst-join: no metadata service in {deadline_s} s")
        time.sleep(poll_s)


# What the join program is doing, for the one line it prints when that fails
# (`gpu-burst-join: FAILED <step>: <why>`): the controller reads it from the VM's serial
# console when it gives up on the VM, and puts it on its decision.
STEP = ["config"]
# slurmd's own words that mean slurmctld refused this VM's MUNGE credentials: slurmctld drops
# a request it cannot decode, so slurmd reads nothing back ("Zero Bytes were transmitted or
# received", which Slurm's FAQ puts down to munge keys that differ, or clocks far apart)
_AUTH = re.compile(r"authenticat|credential|munge|Zero Bytes were transmitted", re.I)
_STARTED = re.compile(r"slurmd started on ")
_NO_ROUTE = re.compile(r"Connection refused|timed out|No route|Unable to contact|unreachable")


def apply_mig(mig: dict) -> None:  # type: ignore[type-arg]
    """A MIG pool's layout, before slurmd starts (it declares the devices as GRES): MIG mode on,
    then `per_gpu` GPU instances of `profile`, each with its compute instance, on every GPU.
    nvidia-smi says why when the GPU or its driver cannot (the join fails with its words)."""
    if not mig:
        return
    profile, per_gpu, gpus = str(mig["profile"]), int(mig["per_gpu"]), int(mig["gpus"])
    nvsmi = shutil.which("nvidia-smi") or "nvidia-smi"
    run = lambda *a: subprocess.run([nvsmi, *a], check=True, capture_output=True)  # noqa: E731
    run("-mig", "1")
    for gpu in range(gpus):
        run("mig", "-i", str(gpu), "-cgi", ",".join([profile] * per_gpu), "-C")
    log(f"MIG: {per_gpu} x {profile} on each of {gpus} GPUs")


def reach_slurmctld(conf_server: str, deadline_s: float, poll_s: float) -> None:
    """slurmctld answers TCP from here, or this VM can never be its node: said plainly (a
    firewall or route between the burst subnet and slurmctld), before slurmd retries quietly."""
    host, _, port = conf_server.rpartition(":")
    host, port = (host or conf_server), (port if host else "6817")
    end, why = time.monotonic() + deadline_s, ""
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            return
        except OSError as exc:
            why = str(exc.strerror or exc)
        if time.monotonic() >= end:
            raise SystemExit(
                f"slurmctld at {host}:{port} is unreachable from this VM ({why}, for "
                f"{deadline_s:g} s): open tcp {port} from the burst subnet to it"
            )
        time.sleep(poll_s)


def slurmd_said(lines: int = 40) -> list[str]:
    """slurmd's last words: its journal (before it has a config, it writes to stderr), then
    the SlurmdLogFile the config slurmctld served names, where it writes once it has one."""
    out = subprocess.run(
        ["journalctl", "-u", "slurmd", "-o", "cat", "--no-pager", "-n", str(lines)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    said = out.stdout.splitlines()
    try:
        with open(SLURMD_CONF_CACHE) as f:
            conf = dict(re.findall(r"^\s*(\w+)\s*=\s*(\S+)", f.read(), flags=re.M))
        with open(conf.get("SlurmdLogFile", "/nonexistent"), errors="replace") as f:
            said += f.read().splitlines()[-lines:]
    except OSError:
        pass  # no config fetched yet, or no log file of its own
    return [x.strip() for x in said if x.strip()]


def watch_slurmd(watch_s: float, poll_s: float) -> None:
    """slurmd, just started, gets through its start ("slurmd started on ...") without a word
    that dooms the join (it waits up to 20 s for a device gres.conf names before it gives up);
    else why not, in its own words. Still starting after `watch_s`: the controller's join
    timeout decides."""
    end = time.monotonic() + watch_s
    while time.monotonic() < end:
        time.sleep(poll_s)
        state = subprocess.run(
            ["systemctl", "is-active", "slurmd"], capture_output=True, text=True, check=False
        ).stdout.strip()
        said = slurmd_said()
        errors = [x for x in said if "error" in x.lower() or "fatal" in x.lower()]
        auth = [x for x in errors if _AUTH.search(x)]
        if auth:
            raise SystemExit(
                f"munge key rejected by slurmctld (not the cluster's key, or this VM's clock "
                f"far off): {auth[-1]}"
            )
        if state in ("failed", "inactive"):
            last = " / ".join(errors[-2:]) if errors else (said[-1] if said else "no words")
            raise SystemExit(f"slurmd did not start ({state}): {last}")
        if any(_STARTED.search(x) for x in said):
            return
        if any(_NO_ROUTE.search(x) for x in errors):
            log(f"slurmd: {errors[-1]}")  # slurmd retries; the controller's timeout decides
    log("slurmd still starting; the controller's join timeout decides")


def main() -> int:
    with open(CONFIG) as f:
        cfg = json.load(f)
    deadline, poll = float(cfg.get("join_deadline_s", 600)), float(cfg.get("poll_s", 2))
    STEP[0] = "metadata"
    meta = connect(cfg["cloud"], deadline, poll)
    instance_id = meta.instance_id()
    STEP[0] = "node-name"
    node = wait_for_node(meta, cfg["node_key"], deadline, poll)
    log(f"instance {instance_id} is slurm node {node}")
    os.makedirs(os.path.dirname(STATE), exist_ok=True)
    with open(STATE, "w") as f:
        json.dump({"instance_id": instance_id, "node": node, "address": meta.address()}, f)
    STEP[0] = "munge-key"
    install_munge_key(cfg, meta)
    STEP[0] = "mig"
    apply_mig(cfg.get("mig") or {})
    STEP[0] = "slurmctld"
    reach_slurmctld(cfg["conf_server"], min(deadline / 2, 60.0), poll)
    STEP[0] = "slurmd"
    opts = f"--conf-server {cfg['conf_server']} -N {node}"
    with open("/etc/default/slurmd", "w") as f:
        f.write(f'SLURMD_OPTIONS="{opts}"\n')
    os.makedirs(os.path.dirname(SLURMD_DROPIN), exist_ok=True)
    with open(SLURMD_DROPIN, "w") as f:
        f.write("[Unit]\nConditionPathExists=\n")
    subprocess.run(["systemctl", "daemon-reload"], check=True)
    subprocess.run(["systemctl", "enable", "--now", "munge"], check=True)
    subprocess.run(["systemctl", "enable", "slurmd"], check=True)
    # not --now: a Type=notify slurmd (Debian 13) holds `start` until it has registered,
    # which with a wrong key or no route is never; watch_slurmd says why instead
    subprocess.run(["systemctl", "start", "--no-block", "slurmd"], check=True)
    watch_slurmd(float(cfg.get("slurmd_watch_s", 60)), poll)
    log(f"slurmd started as {node}")
    STEP[0] = "agent"
    if cfg.get("controller_api"):
        watch = ["/usr/bin/python3", "/usr/local/sbin/gpu-burst-watch"]
        unit = ["--unit=gpu-burst-watch", "--property=Restart=always", "--property=RestartSec=2"]
        subprocess.run(["systemd-run", *unit, *watch], check=True)
        # the controller knows a GCE VM by its name, an EC2 one by its instance id
        ident = (meta.name() if isinstance(meta, Gcp) else None) or instance_id or ""
        api = cfg["controller_api"]
        token = fetch_agent_token(api, node, ident, min(deadline, 120.0), poll)
        if token and cfg.get("agent"):
            start_agent(cfg["agent"], api, node, token)
    return 0


def run() -> int:
    """main(), and when a step fails the one line that says which and why."""
    try:
        return main()
    except SystemExit as exc:
        if exc.code in (None, 0):
            return 0
        why = str(exc.code).removeprefix("gpu-burst-join: ")
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        why = f"`{' '.join(map(str, exc.cmd))}` exited {exc.returncode}" + (
            f": {said[-1]}" if said else ""
        )
    except urllib.error.HTTPError as exc:
        why = f"{exc.url}: HTTP {exc.code} {exc.read().decode(errors='replace')[:200]}"
    except Exception as exc:  # the one line is the point: whatever it was, say it
        why = f"{type(exc).__name__}: {exc}"
    log(f"FAILED {STEP[0]}: {why}"[:600])
    return 1


if __name__ == "__main__":
    sys.exit(run())

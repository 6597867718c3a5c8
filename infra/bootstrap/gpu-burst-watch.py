#!/usr/bin/python3
"""Watch this VM's metadata for its cloud's spot warning; report it to the controller at once.

Started by gpu-burst-join once slurmd runs (a systemd unit). Standard library only.
AWS (IMDSv2): spot/instance-action (the 2-minute notice) and events/recommendations/rebalance.
GCE: instance/preempted, TRUE about 30 s before the VM stops. AWS asks for a check every 5 s.
The report is `munge -s <JSON>`, signed with the cluster's munge key, POSTed to
<controller_api>/v1/nodes/<node>/warnings. It is sent again while the warning stands (a new
credential each time: munged refuses a replay), so a controller that takes over hears it.
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

CONFIG = "/etc/gpu-burst/node.json"
STATE = "/run/gpu-burst/joined.json"
METADATA = os.environ.get("GPU_BURST_METADATA", "http://169.254.169.254")


def log(msg):
    print(f"gpu-burst-watch: {msg}", file=sys.stderr, flush=True)


def get(path, headers, method="GET"):
    req = urllib.request.Request(METADATA + path, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.read().decode().strip()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def aws_warnings():
    tok = get("/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "300"}, "PUT")
    h = {"X-aws-ec2-metadata-token": tok or ""}
    found = []
    action = get("/latest/meta-data/spot/instance-action", h)
    if action:
        found.append(("interruption", json.loads(action).get("time", "")))
    if get("/latest/meta-data/events/recommendations/rebalance", h):
        found.append(("rebalance", ""))
    return found


GCE = {"Metadata-Flavor": "Google"}


def gce_warnings():
    flag = get("/computeMetadata/v1/instance/preempted", GCE)
    return [("preemption", "")] if (flag or "").upper() == "TRUE" else []


def report(cfg, joined, kind, action_time):
    payload = {"node": joined["node"], "instance_id": joined["instance_id"], "kind": kind}
    if action_time:
        payload["action_time"] = action_time
    cred = subprocess.run(
        ["munge", "-s", json.dumps(payload)], capture_output=True, check=True, text=True
    ).stdout.strip()
    url = f"{cfg['controller_api'].rstrip('/')}/v1/nodes/{joined['node']}/warnings"
    req = urllib.request.Request(
        url, json.dumps({"credential": cred}).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            log(f"{kind} reported: HTTP {resp.status} {resp.read().decode()}")
    except urllib.error.HTTPError as exc:
        log(f"{kind} refused: HTTP {exc.code} {exc.read().decode()}")


def main():
    with open(CONFIG) as f:
        cfg = json.load(f)
    with open(STATE) as f:
        joined = json.load(f)
    if cfg["cloud"] == "gcp":  # the controller knows a GCE VM by its name, not its number
        joined["instance_id"] = get("/computeMetadata/v1/instance/name", GCE) or joined["node"]
    poll, resend = float(cfg.get("watch_poll_s", 2)), float(cfg.get("watch_resend_s", 10))
    look = aws_warnings if cfg["cloud"] == "aws" else gce_warnings
    sent = {}
    while True:
        try:
            for kind, action_time in look():
                if time.monotonic() - sent.get(kind, -resend) >= resend:
                    sent[kind] = time.monotonic()
                    report(cfg, joined, kind, action_time)
        except (OSError, ValueError, subprocess.CalledProcessError) as exc:
            log(f"{type(exc).__name__}: {exc}")
        time.sleep(poll)


if __name__ == "__main__":
    main()

"""What a burst node proves about itself to the API without a bearer token: a MUNGE credential
(`munge -s <JSON>`, made as root on the node with the cluster's munge key, which every Slurm
node holds), decoded by the munged slurmctld uses. munged refuses a credential made with another
key, an expired one and a replay; what it speaks for must then be a live instance of this
controller bound to that node. Each refusal is a 403 with its reason."""

from __future__ import annotations

from fastapi import HTTPException

from provisioner.api.deps import ApiDeps
from provisioner.domain.records import StoredInstance
from provisioner.observe.munge_credentials import CredentialRejected

ROOT_UID = 0


def root_payload(deps: ApiDeps, credential: str, takes: str) -> bytes:
    """The payload of a credential root made on a host holding the cluster's key. `takes`:
    what the endpoint takes, for the 503 of a controller with no munged."""
    if deps.munge is None:
        raise HTTPException(503, f"this controller takes no {takes}: no munged set")
    try:
        claim = deps.munge.decode(credential)
    except CredentialRejected as exc:
        raise HTTPException(403, str(exc)) from None
    if claim.uid != ROOT_UID:
        raise HTTPException(403, f"the credential was made by uid {claim.uid}, not root")
    return claim.payload


def bound_instance(deps: ApiDeps, node: str, claimed_node: str, instance_id: str) -> StoredInstance:
    """The live record of `instance_id`, bound to `node` (the path's), for which the
    credential speaks (`claimed_node`)."""
    if claimed_node != node:
        raise HTTPException(403, f"the credential speaks for node {claimed_node!r}")
    rec = deps.store.instance(instance_id)
    if rec is None or rec.instance.state.terminal:
        raise HTTPException(403, f"{instance_id} is no live instance of this controller")
    if rec.instance.node_name != node:
        bound = rec.instance.node_name or "no node"
        raise HTTPException(403, f"{instance_id} is bound to {bound}, not {node}")
    return rec

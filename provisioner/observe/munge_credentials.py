"""Decoding a MUNGE credential with the cluster's own munged: who made it, and what it says.

Slurm trusts any host holding the cluster's munge key (that is how slurmd joins), so a report
from a burst node is signed the same way: the node's watcher runs `munge -s <payload>` and the
controller decodes the credential with `unmunge` against the munged its slurmctld uses. munged
checks the MAC, the time to live (300 s by default) and replays (a credential decodes once:
"Replayed credential"), so a captured report cannot be sent again, and one forged without the
key does not decode. See munge(7) and unmunge(1).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from provisioner.domain.errors import ProvisionerError

MAX_CREDENTIAL_BYTES = 8192
# munge_err_t (munge.h): unmunge exits with the status it decoded.
MUNGE_STATUS = {
    6: "munged is not reachable (socket)",
    7: "munged timed out",
    8: "not a valid credential (bad format)",
    11: "the MAC does not match (made with another key, or altered)",
    14: "invalid credential",
    15: "expired credential (older than its time to live)",
    16: "rewound credential (made in the future)",
    17: "replayed credential (already decoded once)",
    18: "unauthorized credential",
}


class CredentialRejected(ProvisionerError):
    """The credential did not decode: munged's own status says why (replayed, expired,
    invalid, a key this cluster does not hold), or munged could not be reached."""

    http_status = 403


@dataclass(frozen=True, slots=True)
class MungeClaim:
    uid: int
    gid: int
    encode_ts: float
    encode_host: str
    payload: bytes


def parse_unmunge(out: bytes) -> MungeClaim:
    """`unmunge -N` output: `KEY: value` lines, a blank line, then the payload."""
    head, sep, payload = out.partition(b"\n\n")
    if not sep:
        raise CredentialRejected("unmunge gave no payload")
    meta: dict[str, str] = {}
    for line in head.decode("utf-8", "replace").splitlines():
        key, colon, value = line.partition(":")
        if colon:
            meta[key.strip()] = value.strip()
    try:
        return MungeClaim(
            uid=int(meta["UID"]),
            gid=int(meta["GID"]),
            encode_ts=float(meta["ENCODE_TIME"]),
            encode_host=meta.get("ENCODE_HOST", ""),
            payload=payload,
        )
    except (KeyError, ValueError):
        raise CredentialRejected(f"unmunge output lacks UID, GID or ENCODE_TIME: {meta}") from None


class MungeDecoder:
    """`unmunge` against one munged socket (the one slurmctld authenticates with)."""

    def __init__(self, socket: str = "", unmunge: str = "unmunge", timeout_s: float = 5.0):
        self.socket = socket
        self.unmunge = unmunge
        self.timeout_s = timeout_s

    def decode(self, credential: str) -> MungeClaim:
        cred = credential.strip()
        if not cred.startswith("MUNGE:") or len(cred) > MAX_CREDENTIAL_BYTES:
            raise CredentialRejected("not a MUNGE credential")
        argv = [self.unmunge, "-N", *(["-S", self.socket] if self.socket else [])]
        try:
            res = subprocess.run(
                argv, input=cred.encode(), capture_output=True, timeout=self.timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CredentialRejected(f"unmunge could not run: {exc}") from None
        if res.returncode != 0:
            err = res.stderr.decode("utf-8", "replace").strip()
            why = MUNGE_STATUS.get(res.returncode) or err or f"unmunge exited {res.returncode}"
            raise CredentialRejected(f"munge credential rejected: {why}")
        return parse_unmunge(res.stdout)


__all__ = ["CredentialRejected", "MungeClaim", "MungeDecoder", "parse_unmunge"]

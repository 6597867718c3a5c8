"""Entry point the Pulumi CLI runs (`pulumi preview --policy-pack policies/policypack`).

Only wraps the policies: constructing PolicyPack starts the analyzer's gRPC server and blocks.
"""

import sys
from pathlib import Path

from pulumi_policy import EnforcementLevel, PolicyPack

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_policies import POLICIES

PolicyPack(
    name="gpu-burst-guardrails",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
)

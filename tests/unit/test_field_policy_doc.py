"""docs/field.md shows the AWS controller policy the least-privilege host test loads: the copy
a reader follows must be that policy, statement for statement."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_policy_in_the_field_guide_is_the_tested_file() -> None:
    doc = (REPO / "docs" / "field.md").read_text()
    (block,) = [b for b in re.findall(r"```json\n(.*?)```", doc, flags=re.S) if "NodeGroups" in b]
    shown = json.loads(block)
    tested = json.loads((REPO / "infra" / "iam" / "aws-controller-policy.json").read_text())

    def norm(policy: dict) -> list[tuple[str, tuple[str, ...], str]]:
        return sorted(
            (s["Sid"], tuple(sorted(s["Action"])), json.dumps(s["Resource"]))
            for s in policy["Statement"]
        )

    assert norm(shown) == norm(tested)

"""Infrastructure-as-code reviews: every burst pool change as a priced, policy-checked plan.

`provisioner iac review` (and `GET /v1/iac/review`) render the pools declared in `policies/` into
their cloud resources through `infra/pool_program.py`, diff them against a base (a git ref or a
directory), price each pool from the offer catalog, and evaluate the CrossGuard pack in-process.
Pulumi is imported lazily, inside the functions that render or evaluate, so importing this
package stays cheap. See docs/iac.md.
"""

from __future__ import annotations

"""A cloud that lists only part of what it runs (GCE's `aggregatedList` with unreachable
zones): the part that answered is used, and the pass knows the rest is missing. The listing
here is a hand-made answer; the GCE port's side is in tests/contract/test_listing_contract.py."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from provisioner.act.ports import CloudState, OwnedInstance, PartialListing
from provisioner.domain.errors import TransientError
from provisioner.reconcile.context import PassReport
from provisioner.reconcile.snapshot_view import list_owned

NOW = 1_800_000_000.0


def vm(iid: str, cloud: str) -> OwnedInstance:
    return OwnedInstance(
        iid, cloud, "r", "r-a", "t", CloudState.RUNNING, NOW - 60, tags={"controller": "c"}
    )


class Answers:
    """A capacity port whose listing returns `listed`, or raises `error`."""

    def __init__(self, listed: Sequence[OwnedInstance] = (), error: Exception | None = None):
        self.listed, self.error = list(listed), error

    def list_owned(self, controller: str) -> list[OwnedInstance]:
        if self.error is not None:
            raise self.error
        return self.listed


def clouds(**answers: Answers) -> dict[str, Any]:
    return {name: SimpleNamespace(capacity=a) for name, a in answers.items()}


def test_a_partial_answer_keeps_what_answered_and_names_the_gap() -> None:
    part = [vm("gce-a-1", "gcp")]
    gap = "gcp: instances listed in part, unreachable: zones/r-b"
    report = PassReport(now_ts=NOW)
    listing = list_owned(
        clouds(
            aws=Answers([vm("i-1", "aws")]),
            gcp=Answers(error=PartialListing(gap, part, code="UNREACHABLE")),
        ),
        "c",
        report,
    )
    assert sorted(o.instance_id for o in listing.owned) == ["gce-a-1", "i-1"]
    assert not listing.complete and listing.gaps == (gap,)
    assert len(report.errors) == 1 and report.errors[0].startswith("list gcp: ")
    assert report.errors[0].endswith(":UNREACHABLE")


def test_a_failed_listing_is_a_gap_and_a_whole_one_is_none() -> None:
    listing = list_owned(
        clouds(aws=Answers([vm("i-1", "aws")]), gcp=Answers(error=TransientError("503"))),
        "c",
        PassReport(now_ts=NOW),
    )
    assert [o.instance_id for o in listing.owned] == ["i-1"]
    assert listing.gaps == ("gcp: 503",)
    whole = list_owned(clouds(aws=Answers([vm("i-1", "aws")])), "c", PassReport(now_ts=NOW))
    assert whole.complete and whole.gaps == ()

"""The learned runtime history survives a restart: stored, read back, and replaced per name."""

from __future__ import annotations

from provisioner.domain.records import JobUsage
from provisioner.reconcile.runtime_learning import RuntimeLearner
from provisioner.store import Store


def test_saving_replaces_only_the_names_given(store) -> None:
    store.save_runtime_history({"user:ann": [10.0, 20.0], "group:cv": [5.0]}, 100.0)
    store.save_runtime_history({"user:ann": [20.0, 30.0]}, 200.0)
    assert store.runtime_history() == {"group:cv": [5.0], "user:ann": [20.0, 30.0]}


def _closed(job_id: str, start: float, end: float, node: str = "n1") -> JobUsage:
    return JobUsage(job_id, node, 4, start, end, account="cv", partition="onprem", user="ann")


def test_a_restarted_controller_predicts_from_what_it_learned_before(db_url) -> None:
    first = Store(db_url)
    learner = RuntimeLearner(first)
    # job a ran 600 s on two nodes (one record each, learned once); job b ran 1000 s
    seen = learner.learn([_closed("a", 0, 600), _closed("a", 0, 600, "n2")], 600.0)
    seen += learner.learn([_closed("b", 700, 1700)], 1700.0)
    assert seen == 2
    first.close()
    again = Store(db_url)
    pred = RuntimeLearner(again).history.predict(user="ann", group="cv", partition="onprem")
    again.close()
    # the mean of ann's last two: (600 + 1000) / 2; spread: sample std of 600, 1000
    assert pred is not None
    assert (pred.runtime_s, pred.source, pred.samples) == (800.0, "user", 2)
    assert round(pred.spread_s or 0, 3) == round((2 * 200.0**2) ** 0.5, 3)

"""The Bayes ceiling held to the phantom target (benchmarks/taste_recovery.py,
``safe_ceiling``; docs/quality.md, "The Bayes ceiling"): the decision it scores, on
posteriors whose answer is known."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "taste_recovery.py"


@pytest.fixture(scope="module")
def taste() -> ModuleType:
    spec = importlib.util.spec_from_file_location("taste_recovery", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["taste_recovery"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def test_certain_posteriors_name_exactly_the_dislikes(taste: ModuleType) -> None:
    ranking = [(1.0, True), (1.0, True), (0.0, False), (0.0, False)]
    f1, recall, phantoms = taste.safe_ceiling([ranking, ranking], 3)
    assert (f1, recall, phantoms) == (pytest.approx(0.8), pytest.approx(2 / 3), 0.0)


def test_the_phantom_budget_is_shared_between_users(taste: ModuleType) -> None:
    """One user's uncertain pattern (p = 0.9: 0.1 expected phantoms) fits the budget of
    0.05 a user only on average with a user who risks nothing; alone it does not."""
    sure = [(1.0, True), (0.0, False)]
    risky = [(0.9, True), (0.0, False)]
    assert taste.safe_ceiling([risky, sure], 3)[0] == pytest.approx((0.5 + 0.5) / 2)
    assert taste.safe_ceiling([risky, risky], 3)[0] == 0.0  # 0.1 expected phantoms each
    # and it is scored on the truth: a confident mistake counts as a phantom
    wrong = [(0.99, False), (0.0, True)]
    assert taste.safe_ceiling([wrong], 3) == (0.0, 0.0, 1.0)


def test_without_a_bound_the_expected_f1_set_is_unchanged(taste: ModuleType) -> None:
    prob = {"a": 0.9, "b": 0.6, "c": 0.2, "d": 0.05}
    # E[F1] of the top k with 3 true: 2·0.9/4, 2·1.5/5, 2·1.7/6, 2·1.75/7 → k = 2
    assert taste._expected_f1_set(prob, 3) == {"a", "b"}
    assert taste.safe_ceiling([], 3) == (0.0, 0.0, 0.0)

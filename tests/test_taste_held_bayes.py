"""The Bayes decision held to the phantom target (benchmarks/taste_recovery.py,
``held_bayes``; docs/quality.md, "The Bayes decision at the phantom target"): the
decision it scores, on posteriors whose answer is known."""

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
    f1, recall, phantoms = taste.held_bayes([ranking, ranking], 3)
    assert (f1, recall, phantoms) == (pytest.approx(0.8), pytest.approx(2 / 3), 0.0)


def test_the_phantom_budget_is_shared_between_users(taste: ModuleType) -> None:
    """0.05 phantoms a user on average: one confident mistake among 20 users fits, among
    10 it does not, and the price that drops it is paid by that user's choice only."""
    sure = [(1.0, True), (0.0, False)]
    wrong = [(0.9, False), (0.0, True)]
    f1, _, phantoms = taste.held_bayes([wrong, *[sure] * 19], 3)
    assert (f1, phantoms) == (pytest.approx(19 * 0.5 / 20), pytest.approx(1 / 20))
    f1, _, phantoms = taste.held_bayes([wrong, *[sure] * 9], 3)
    assert (f1, phantoms) == (pytest.approx(9 * 0.5 / 10), 0.0)


def test_the_truth_sets_only_the_price(taste: ModuleType) -> None:
    """An uncertain pattern that is a dislike is no phantom: kept at any budget."""
    risky = [(0.9, True), (0.0, False)]
    assert taste.held_bayes([risky, risky], 3) == (pytest.approx(0.5), 1 / 3, 0.0)


def test_without_a_bound_the_expected_f1_set_is_unchanged(taste: ModuleType) -> None:
    prob = {"a": 0.9, "b": 0.6, "c": 0.2, "d": 0.05}
    # E[F1] of the top k with 3 true: 2·0.9/4, 2·1.5/5, 2·1.7/6, 2·1.75/7 → k = 2
    assert taste._expected_f1_set(prob, 3) == {"a", "b"}
    assert taste.held_bayes([], 3) == (0.0, 0.0, 0.0)


def test_tag_share_turns_rejections_into_tags_on_the_listed_features(
    taste: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--set tag_share=…`` (docs/quality.md, "Version 4 on fresh seeds, and with tags"):
    that share of the rejections becomes a "not this" tag on the listed features; at 0 the
    interaction stream is the one recorded before the option existed."""
    recorded: list[tuple[str, str | None, int]] = []
    unary = taste.Recorder.unary

    def spy(self: object, turn: int, kind: str, polarity: str, art: str, feats: list[object],
            tag_text: str | None = None) -> None:  # fmt: skip
        recorded.append((kind, tag_text, len(feats)))
        unary(self, turn, kind, polarity, art, feats, tag_text)

    monkeypatch.setattr(taste.Recorder, "unary", spy)
    runs: dict[float, list[tuple[str, str | None, int]]] = {}
    for share in (0.0, 1.0):
        recorded.clear()
        taste.run_arm(7, "v3-pairwise", taste.SimConfig(tag_share=share), (50,))
        runs[share] = list(recorded)
    kinds = {kind for kind, _, _ in runs[0.0]}
    assert "explicit_tag" not in kinds and {"thumbs_down", "abandoned_generation"} <= kinds
    tags = [r for r in runs[1.0] if r[0] == "explicit_tag"]
    assert tags and all(t == "not this" and n == 3 for _, t, n in tags)  # every listed one
    assert not {"thumbs_down", "abandoned_generation"} & {kind for kind, _, _ in runs[1.0]}
    # the same turns: only the rejections' kind changed
    assert [k if k not in ("thumbs_down", "abandoned_generation") else "explicit_tag"
            for k, _, _ in runs[0.0]] == [k for k, _, _ in runs[1.0]]  # fmt: skip

"""Derivation version 5 (docs/quality.md, "Version 5"): scenarios a person would recognise,
each a fixed history with its expected Avoid / Prefer lists; the statement floor for a tag
about one feature alone and not for a tag forwarded to several; the per-class noise prior;
the injection explanation; the shared-tag bookkeeping through reads, dumps and loads. The
scenarios where versions 4 and 5 agree (five rejections, the phantom, reversals, every
record explained) run for both in tests/test_derivation_v4.py."""

from __future__ import annotations

import pytest

from creative_memory.engine.derivation.registry import derive, new_state
from creative_memory.engine.derivation.v2.model import Model
from creative_memory.engine.derivation.v3 import ModelV3
from creative_memory.engine.derivation.v5 import V5_TABLE, DerivedStateV5, ModelV5
from creative_memory.engine.explain import explain
from creative_memory.engine.models import Preference
from tests.test_derivation_v2 import Log
from tests.test_derivation_v4 import NEON, lists, reject_neon, warm_up

BOLD = ("typography", "bold_sans")
CALM = ("color", "calm_pastels")


def five(log: Log) -> list[str]:
    return lists(log, "5")[0]


def record(log: Log, pattern: str) -> Preference:
    st = derive(log.events, "5")
    return next(r for r in st.global_records if r.pattern == pattern)


@pytest.mark.parametrize(("version", "needed"), [("3", 6), ("5", 5)])
def test_thumbs_down_on_one_pattern_alone_is_avoided_after_five(version: str, needed: int) -> None:
    log = Log()
    for n in range(1, needed + 1):
        assert "neon_palette" not in lists(log, version)[0]
        log.signal("thumbs_down", "negative", [NEON], artifact=f"a{n}")
    assert lists(log, version)[0] == ["neon_palette"]


@pytest.mark.parametrize(("version", "needed"), [("3", 10), ("5", 8)])
def test_a_new_memory_with_nothing_accepted_waits_longer_for_neon(
    version: str, needed: int
) -> None:
    """The five rejections of tests/test_derivation_v4.py without the acceptances before
    them: nothing tells "rejects neon" from "rejects everything so far" (the user's base
    rate takes part of the blame) nor exonerates the layouts and typefaces beside it, so
    neon is avoided after the eighth rejection, not the fifth — and then neon alone."""
    log = Log()
    avoided = []
    for i in range(needed):
        reject_neon(log, i)
        avoided.append("neon_palette" in lists(log, version)[0])
    assert avoided == [False] * (needed - 1) + [True]
    assert lists(log, version)[0] == ["neon_palette"]


def test_a_tag_about_one_feature_alone_is_avoided_at_once() -> None:
    log = Log()
    log.signal("explicit_tag", "negative", [NEON], artifact="t", tag_text="too noisy")
    assert lists(log, "5") == (["neon_palette"], [])
    assert lists(log, "3") == ([], [])
    assert record(log, "neon_palette").signal_strength == V5_TABLE.statement_floor


def test_a_positive_tag_about_one_feature_alone_is_preferred_at_once() -> None:
    log = Log()
    log.signal("explicit_tag", "positive", [CALM], artifact="t", tag_text="love this")
    assert lists(log, "5") == ([], ["calm_pastels"])


def test_a_tag_forwarded_to_every_listed_feature_floors_none_of_them() -> None:
    """The demo's chapter 8 (version 4's phantom): "not this" on neon posters whose
    extractor also lists their bold_sans headlines, then three choices of calm pastels over
    neon in the same font. Version 5 avoids neon alone, as version 3 does; version 4 avoids
    bold_sans too."""
    log = Log()
    for i in range(3):
        log.signal("explicit_tag", "negative", [NEON, BOLD], artifact=f"k{i}", tag_text="not this")
    assert five(log) == []  # which of the two the user meant is not known yet
    for _ in range(3):
        log.compare([CALM, BOLD], [NEON, BOLD])
    assert five(log) == ["neon_palette"]
    assert lists(log, "3")[0] == ["neon_palette"]
    assert lists(log, "4")[0] == ["neon_palette", "bold_sans"]
    st = derive(log.events, "5")
    assert isinstance(st, DerivedStateV5)
    bold = next(r for r in st.global_records if r.pattern == "bold_sans")
    assert st.evidence_for(bold)["injection"]["lone_tags"] == 0


def test_a_lone_tag_floors_even_beside_forwarded_ones() -> None:
    log = Log()
    log.signal("explicit_tag", "negative", [NEON, BOLD], artifact="k", tag_text="not this")
    log.signal("explicit_tag", "negative", [NEON], artifact="t", tag_text="too noisy")
    assert five(log) == ["neon_palette"]


def test_a_lone_tag_about_a_feature_the_user_also_accepted_is_not_floored() -> None:
    """The floor trusts a tag only while nothing the user did about the feature says
    otherwise (an extractor that lists one feature of an artifact would otherwise pin every
    "not this" on it); the fit still weighs the tag."""
    log = Log()
    log.signal("repeated_acceptance", "positive", [NEON], artifact="yes")
    log.signal("explicit_tag", "negative", [NEON], artifact="t", tag_text="too noisy")
    assert "neon_palette" not in five(log)
    st = derive(log.events, "5")
    assert isinstance(st, DerivedStateV5)
    rec = next(r for r in st.global_records if r.pattern == "neon_palette")
    inj = st.evidence_for(rec)["injection"]
    if rec.polarity == "negative":
        assert inj["lone_tags"] == 1 and inj["events_against"] == 1
        assert inj["statement_floor"] is None
    for i in range(3):  # the fit weighs the tags: three more are not enough yet
        log.signal("explicit_tag", "negative", [NEON], artifact=f"t{i}", tag_text="too noisy")
        assert "neon_palette" not in five(log)
    log.signal("explicit_tag", "negative", [NEON], artifact="t3", tag_text="too noisy")
    assert five(log) == ["neon_palette"]  # the fifth is


def test_a_read_between_the_events_of_one_tag_drops_the_floor_when_the_row_grows() -> None:
    """A tag's events arrive one feature at a time; a read after the first sees a tag about
    that feature alone, the next event makes it a tag about two. The record read after the
    second must not keep the first read's floor."""
    log = Log()
    log.signal("explicit_tag", "negative", [NEON, BOLD], artifact="k", tag_text="not this")
    first, second = log.events
    st = new_state("5")
    st.apply(first)
    assert [r.pattern for r in st.global_records if r.signal_strength >= 0.4] == ["neon_palette"]
    st.apply(second)
    incremental = [r.to_dict() for r in st.global_records]
    assert incremental == [r.to_dict() for r in derive(log.events, "5").global_records]
    assert all(r.signal_strength < 0.4 for r in st.global_records)


def test_the_shared_tag_counts_survive_dump_and_load() -> None:
    log = Log()
    log.signal("explicit_tag", "negative", [NEON, BOLD], artifact="k", tag_text="not this")
    log.signal("explicit_tag", "negative", [CALM], artifact="t", tag_text="too pale")
    log.signal("explicit_tag", "negative", [NEON], artifact="u", tag_text="too noisy")
    whole = derive(log.events, "5")
    for cut in range(1, len(log.events)):  # inside the open row, after it, …
        st = new_state("5")
        for ev in log.events[:cut]:
            st.apply(ev)
        resumed = type(st).load(st.dump())
        for ev in log.events[cut:]:
            resumed.apply(ev)
        assert resumed.dump() == whole.dump()
        assert [r.to_dict() for r in resumed.global_records] == [
            r.to_dict() for r in whole.global_records
        ]
        if cut == 2:  # the shared tag alone: it floors neither of its two features
            assert {r.pattern for r in st.global_records if r.signal_strength >= 0.4} == set()
    assert isinstance(whole, DerivedStateV5)
    model = whole.models[None]
    assert isinstance(model, ModelV5)
    neon, bold = model.features[NEON], model.features[BOLD]
    assert model.lone_tags(neon, "negative") == 1 and model.lone_tags(bold, "negative") == 0
    assert model.lone_tags(neon, "positive") == 0


def test_the_noise_prior_is_one_for_verdicts_and_two_for_the_other_classes() -> None:
    model = ModelV5(V5_TABLE)
    assert model.noise_prior("verdict") == 1.0
    assert model.noise_prior("comparison") == model.noise_prior("statement") == 2.0
    assert ModelV3(V5_TABLE).noise_prior("verdict") == V5_TABLE.sigma_prior == 1.0
    assert V5_TABLE.as_dict()["noise_priors"] == {"comparison": 2.0, "statement": 2.0}
    # the bulk fold stays inlined: the model does not override add_row
    assert ModelV5.add_row is Model.add_row


def test_explain_names_the_floor_and_the_lone_tags() -> None:
    log = Log()
    log.signal("explicit_tag", "negative", [NEON], artifact="t", tag_text="too noisy")
    ex = explain(log.events, "5", "color", "neon_palette")
    assert ex.evidence is not None
    (inj,) = [e["injection"] for e in ex.evidence]
    assert inj["lone_tags"] == 1
    assert inj["statement_floor"] == V5_TABLE.statement_floor
    assert inj["why"] == "injected: an explicit tag states it (statement floor)"
    rejected = Log()
    warm_up(rejected)
    for i in range(4):
        reject_neon(rejected, i)
    ex = explain(rejected.events, "5", "color", "neon_palette")
    assert ex.evidence is not None
    (inj,) = [e["injection"] for e in ex.evidence]
    assert inj["crosses"] is False and inj["statement_floor"] is None
    assert str(inj["why"]).startswith("not injected: the estimate")

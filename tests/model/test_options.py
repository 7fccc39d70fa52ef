"""GenerationOptions, Reasoning and UNSET."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given

from emelex.model import UNSET, GenerationOptions, InvalidOptions, Reasoning, Unset
from emelex.testing import strategies as est


def test_reasoning_constants() -> None:
    assert Reasoning.OFF.mode == "off"
    assert Reasoning.OFF.budget_tokens is None
    assert Reasoning.AUTO.mode == "auto"
    assert not Reasoning.OFF.enabled
    assert Reasoning.AUTO.enabled
    assert repr(Reasoning.OFF) == "Reasoning.OFF"
    assert repr(Reasoning.budget(512)) == "Reasoning.budget(512)"


def test_reasoning_budget_compares_by_value() -> None:
    assert Reasoning.budget(100) == Reasoning.budget(100)
    assert Reasoning.budget(100) != Reasoning.budget(101)
    assert Reasoning.budget(100) != Reasoning.AUTO
    assert Reasoning("off") == Reasoning.OFF
    assert len({Reasoning.budget(1), Reasoning.budget(1), Reasoning.OFF}) == 2
    budget = Reasoning.budget(100)
    assert budget.mode == "budget"
    assert budget.budget_tokens == 100
    assert budget.enabled


@pytest.mark.parametrize("tokens", [0, -5, True, 1.5, "10", None])
def test_reasoning_budget_must_be_positive_int(tokens: Any) -> None:
    with pytest.raises(InvalidOptions):
        Reasoning.budget(tokens)


def test_reasoning_direct_construction_is_checked() -> None:
    with pytest.raises(InvalidOptions):
        Reasoning("off", 10)
    with pytest.raises(InvalidOptions):
        Reasoning("sometimes")  # type: ignore[arg-type]


def test_unset_is_a_typed_singleton() -> None:
    assert UNSET is Unset.UNSET
    assert repr(UNSET) == "UNSET"
    assert GenerationOptions().reasoning is UNSET


def test_defaults_specify_nothing() -> None:
    options = GenerationOptions()
    assert options.max_tokens is None
    assert options.temperature is None
    assert options.top_p is None
    assert options.seed is None
    assert options.stop == ()
    assert options.reasoning is UNSET


def test_values_are_normalised() -> None:
    options = GenerationOptions(temperature=1, top_p=1, stop=["a", "b"])
    assert options.temperature == 1.0
    assert isinstance(options.temperature, float)
    assert isinstance(options.top_p, float)
    assert options.stop == ("a", "b")
    # A single string is one stop sequence, not one per character.
    assert GenerationOptions(stop="\n\n").stop == ("\n\n",)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"max_tokens": -1},
        {"max_tokens": 1.5},
        {"max_tokens": True},
        {"temperature": -0.1},
        {"temperature": 2.01},
        {"temperature": math.nan},
        {"temperature": math.inf},
        {"temperature": "0.5"},
        {"temperature": False},
        {"top_p": 1.5},
        {"top_p": -0.01},
        {"seed": -1},
        {"seed": 2**63},
        {"seed": "1"},
        {"stop": [""]},
        {"stop": [1]},
        {"stop": 5},
        {"reasoning": "auto"},
        {"reasoning": None},
    ],
)
def test_invalid_options_raise(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptions):
        GenerationOptions(**kwargs)


def test_boundaries_are_accepted() -> None:
    options = GenerationOptions(max_tokens=1, temperature=0, top_p=0, seed=0)
    assert (options.max_tokens, options.temperature, options.top_p, options.seed) == (1, 0, 0, 0)
    options = GenerationOptions(temperature=2, top_p=1, seed=2**63 - 1)
    assert (options.temperature, options.top_p, options.seed) == (2.0, 1.0, 2**63 - 1)


def test_overlay_prefers_fields_the_override_sets() -> None:
    base = GenerationOptions(
        max_tokens=100, temperature=0.2, top_p=0.9, seed=7, stop=("x",), reasoning=Reasoning.AUTO
    )
    override = GenerationOptions(temperature=1.0, stop=("y", "z"))
    merged = base.overlay(override)
    assert merged == GenerationOptions(
        max_tokens=100,
        temperature=1.0,
        top_p=0.9,
        seed=7,
        stop=("y", "z"),
        reasoning=Reasoning.AUTO,
    )


def test_overlay_of_empty_override_is_identity() -> None:
    base = GenerationOptions(max_tokens=5, reasoning=Reasoning.budget(64))
    assert base.overlay(GenerationOptions()) == base
    assert GenerationOptions().overlay(base) == base


def test_overlay_explicit_off_or_auto_clears_a_budget() -> None:
    base = GenerationOptions(reasoning=Reasoning.budget(1024))
    assert base.overlay(GenerationOptions(reasoning=Reasoning.OFF)).reasoning == Reasoning.OFF
    assert base.overlay(GenerationOptions(reasoning=Reasoning.AUTO)).reasoning == Reasoning.AUTO
    off = GenerationOptions(reasoning=Reasoning.OFF)
    budget = Reasoning.budget(32)
    assert off.overlay(GenerationOptions(reasoning=budget)).reasoning == budget


def test_overlay_zero_values_still_count_as_set() -> None:
    base = GenerationOptions(temperature=0.7, seed=3)
    merged = base.overlay(GenerationOptions(temperature=0, seed=0))
    assert merged.temperature == 0.0
    assert merged.seed == 0


@given(est.generation_options(), est.generation_options())
def test_overlay_laws(base: GenerationOptions, override: GenerationOptions) -> None:
    merged = base.overlay(override)
    for name in ("max_tokens", "temperature", "top_p", "seed"):
        mine, theirs = getattr(base, name), getattr(override, name)
        assert getattr(merged, name) == (mine if theirs is None else theirs)
    assert merged.stop == (override.stop or base.stop)
    assert merged.reasoning == (
        base.reasoning if override.reasoning is UNSET else override.reasoning
    )
    # Overlaying the same override twice changes nothing.
    assert merged.overlay(override) == merged


@given(est.generation_options(), est.generation_options(), est.generation_options())
def test_overlay_is_associative(
    first: GenerationOptions, second: GenerationOptions, third: GenerationOptions
) -> None:
    assert first.overlay(second).overlay(third) == first.overlay(second.overlay(third))

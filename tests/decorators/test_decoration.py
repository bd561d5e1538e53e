"""Decorating (issue point 1): bare and with options, names, and misuse
caught at decoration time with the fix in the message."""

from __future__ import annotations

import math
from typing import Any

import pytest

import durable
from durable.decorators.backoff import Backoff
from durable.decorators.registry import REGISTRY, WorkflowDefinition, WorkflowRegistry
from durable.errors import DecoratorError


@durable.workflow
async def bare(x: int) -> int:
    """A bare workflow."""
    return x


@durable.workflow(name="billing.invoice.v1")
async def pinned(x: int) -> int:
    return x


@durable.step
async def bare_step(x: int) -> int:
    """A bare step."""
    return x


@durable.step(name="shop.charge", max_attempts=4, timeout=5)
async def named_step(x: int) -> int:
    return x


def test_bare_and_called_forms_keep_the_function() -> None:
    assert bare.name == f"{__name__}.bare"
    assert bare.__name__ == "bare"
    assert bare.__doc__ == "A bare workflow."
    assert bare.__wrapped__ is bare.fn  # type: ignore[attr-defined]
    assert pinned.name == "billing.invoice.v1"
    assert REGISTRY.get("billing.invoice.v1") == pinned.definition
    assert bare_step.name == f"{__name__}.bare_step"
    assert bare_step.__doc__ == "A bare step."
    assert named_step.name == "shop.charge"
    assert named_step.policy.max_attempts == 4
    assert named_step.policy.timeout == 5
    assert isinstance(durable.step()(bare_step.fn), durable.StepFunction)


@pytest.mark.parametrize(
    "decorate",
    [durable.workflow, durable.workflow(name="x.sync")],
)
def test_a_non_async_workflow_is_refused_with_the_fix(decorate: Any) -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(DecoratorError, match=r"async def plain"):
        decorate(plain)
    with pytest.raises(DecoratorError):
        decorate(42)


def test_a_duplicate_workflow_name_is_refused_with_the_fix() -> None:
    with pytest.raises(DecoratorError) as caught:

        @durable.workflow(name="billing.invoice.v1")
        async def other(x: int) -> int:
            return x

    assert "already used by" in str(caught.value)
    assert f"{__name__}.pinned" in str(caught.value)
    assert "name=..." in str(caught.value)
    assert REGISTRY.get("billing.invoice.v1") == pinned.definition  # unchanged


def test_decorating_the_same_function_again_replaces_it() -> None:
    registry = WorkflowRegistry()

    def define() -> WorkflowDefinition:
        async def flow() -> None:  # one source location: "the same function"
            pass

        return WorkflowDefinition("flow", flow, "workflows")

    registry.register(define())
    again = define()
    registry.register(again)  # a module imported twice, a test run twice
    assert registry.get("flow") is again
    assert len(registry) == 1


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": math.inf}, "timeout"),
        ({"backoff": 1.0}, "Backoff"),
        ({"retry_on": "ValueError"}, "retry_on"),
        ({"retry_on": (KeyboardInterrupt,)}, "retry_on"),
        ({"at_most_once": True, "max_attempts": 3}, "at_most_once"),
        ({"at_most_once": "yes"}, "at_most_once"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_step_options_are_refused_at_decoration(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DecoratorError, match=fragment):
        durable.step(**options)


def test_a_name_given_positionally_is_refused_with_the_fix() -> None:
    with pytest.raises(DecoratorError, match=r"@workflow\(name='x'\)"):
        durable.workflow("x")  # type: ignore[call-overload]
    with pytest.raises(DecoratorError, match=r"@step\(name='x'\)"):
        durable.step("x")  # type: ignore[call-overload]


def test_backoff_delays() -> None:
    b = Backoff(initial=1.0, factor=2.0, max=60.0)
    assert [b.delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert Backoff(initial=0.5, factor=1.0).delay(10) == 0.5
    assert Backoff(initial=1.0, factor=10.0, max=5.0).delay(10_000) == 5.0  # no overflow
    jittered = Backoff(initial=8.0, jitter=0.5)
    assert jittered.delay(1, rand=lambda: 0.0) == 8.0
    assert jittered.delay(1, rand=lambda: 0.999) == pytest.approx(8.0 * (1 - 0.4995))
    with pytest.raises(ValueError, match="start at 1"):
        b.delay(0)


@pytest.mark.parametrize(
    "options",
    [{"initial": -1}, {"factor": 0.5}, {"max": math.nan}, {"jitter": 1.5}, {"initial": "1"}],
)
def test_bad_backoffs_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(DecoratorError):
        Backoff(**options)


def test_the_public_names_are_exported_sorted_and_documented() -> None:
    assert durable.__all__ == sorted(durable.__all__)
    for name in durable.__all__:
        value = getattr(durable, name)
        assert value.__doc__, name
    for name in ("Engine", "workflow", "step", "Backoff", "sleep", "wait_for_signal", "run_id"):
        assert name in durable.__all__

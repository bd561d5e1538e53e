"""Typed values (issue 18 point 7): dataclasses and Pydantic models (nested,
in lists, Optional) as arguments, results, signals and published values
through each codec, validated back into their type; `TypeMismatch` naming
run, step and key; `wf.handle(run_id)` typed."""

from __future__ import annotations

import enum
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

import pydantic
import pytest
from decorator_helpers import Factory, failure_type, make_engine, result

import durable
from durable.decorators.codec import Codec
from durable.decorators.typed import from_plain, to_plain
from durable.errors import CodecError, TypeMismatch
from durable.store.clock import MockClock

CODECS = ["auto", "msgpack"]


class Tier(enum.Enum):
    GOLD = "gold"
    BASIC = "basic"


class Point(NamedTuple):
    x: int
    y: int


class Meta(TypedDict):
    source: str
    at: Point


@dataclass
class Line:
    sku: str
    qty: int


@dataclass
class Order:
    id: str
    lines: list[Line]
    note: str | None = None
    tags: dict[str, Line] = field(default_factory=dict)


class Address(pydantic.BaseModel):
    city: str
    zip: str


class Customer(pydantic.BaseModel):
    name: str
    tier: Tier
    address: Address | None = None
    orders: list[Order] = []


class Approval(pydantic.BaseModel):
    by: str
    ok: bool


@dataclass
class Receipt:
    order: Order
    customer: Customer
    approval: Approval
    where: Point
    history: list[Customer | None]


#: What each body saw: its arguments' and results' types.
SEEN: dict[str, Any] = {}


@durable.step
def enrich(customer: Customer) -> Customer:
    SEEN["enrich"] = type(customer)
    return customer.model_copy(update={"orders": [*customer.orders, order()]})


@durable.step
async def make_receipt(
    o: Order, c: Customer, a: Approval, history: list[Customer | None]
) -> Receipt:
    SEEN["make_receipt"] = (type(o), type(c), type(a), [type(h) for h in history])
    return Receipt(o, c, a, Point(1, 2), history)


@durable.workflow
async def typed_flow(o: Order, c: Customer, *, extra: list[Line] | None = None) -> Receipt:
    SEEN["args"] = (type(o), type(o.lines[0]), type(c), type(c.address), type(extra))
    richer = await enrich(c)
    SEEN["step result"] = (type(richer), type(richer.orders[-1]))
    await durable.publish("progress", [richer, None])
    approval = await durable.wait_for_signal("approve:typed", type=Approval)
    SEEN["signal"] = type(approval)
    return await make_receipt(o, richer, approval, [richer, None])


def order() -> Order:
    return Order("o-1", [Line("pen", 2), Line("ink", 1)], None, {"gift": Line("box", 1)})


def customer() -> Customer:
    return Customer(name="ana", tier=Tier.GOLD, address=Address(city="Oslo", zip="0150"))


@pytest.mark.parametrize("codec", CODECS)
async def test_dataclasses_and_models_round_trip_as_args_results_signals_and_published(
    make_objects: Factory, clock: MockClock, codec: str
) -> None:
    SEEN.clear()
    async with make_engine(make_objects, clock, codec=codec) as engine:
        started = await typed_flow.start(order(), customer(), extra=[Line("x", 1)])
        handle = typed_flow.handle(started.run_id)
        progress = await handle.get("progress", type=list[Customer | None])
        await handle.waiting()
        await engine.signal("approve:typed", Approval(by="bo", ok=True))
        receipt = await result(handle)
        raw = await result(engine.handle(started.run_id))
    assert SEEN["args"] == (Order, Line, Customer, Address, list)
    assert SEEN["enrich"] is Customer
    assert SEEN["step result"] == (Customer, Order)
    assert SEEN["signal"] is Approval
    assert SEEN["make_receipt"] == (Order, Customer, Approval, [Customer, type(None)])
    richer = customer().model_copy(update={"orders": [order()]})
    assert progress == [richer, None]
    assert receipt == Receipt(
        order(), richer, Approval(by="bo", ok=True), Point(1, 2), [richer, None]
    )
    assert type(receipt.where) is Point
    assert type(receipt.customer.tier) is Tier
    assert type(receipt.order.tags["gift"]) is Line
    # engine.handle has no annotation to read: msgpack gives the plain form.
    assert isinstance(raw, Receipt if codec == "auto" else dict)


@durable.job
def ship(o: Order, to: Address) -> list[Line]:
    SEEN["ship"] = (type(o), type(to))
    return [Line(f"{x.sku}@{to.city}", x.qty) for x in o.lines]


@pytest.mark.parametrize("codec", CODECS)
async def test_a_job_takes_and_returns_typed_values(
    make_objects: Factory, clock: MockClock, codec: str
) -> None:
    SEEN.clear()
    async with make_engine(make_objects, clock, codec=codec):
        lines = await ship(order(), Address(city="Oslo", zip="0150"))
        mapped = await ship.map([(order(), Address(city="Rome", zip="00100"))])
    assert SEEN["ship"] == (Order, Address)
    assert lines == [Line("pen@Oslo", 2), Line("ink@Oslo", 1)]
    assert [type(x) for x in lines] == [Line, Line]
    assert [type(x) for x in mapped[0]] == [Line, Line]


# ----------------------------------------------------------- mismatches


@durable.step
def loose() -> Line:
    return {"sku": "pen"}  # type: ignore[return-value]


@durable.workflow
async def mismatched_step() -> str:
    try:
        await loose()
    except TypeMismatch as e:
        return str(e)
    return "no error"


@durable.workflow
async def mismatched_signal() -> str:
    try:
        await durable.wait_for_signal("approve:bad", type=Approval)
    except TypeMismatch as e:
        return str(e)
    return "no error"


@durable.workflow
async def publishes() -> None:
    await durable.publish("count", "seven")


@pytest.mark.parametrize("codec", CODECS)
async def test_a_type_mismatch_names_run_step_and_key(
    make_objects: Factory, clock: MockClock, codec: str
) -> None:
    async with make_engine(make_objects, clock, codec=codec) as engine:
        h = await mismatched_step.start()
        out = await result(h)
        assert f"the result of step {loose.name!r} (position 0 of run {h.run_id!r})" in out
        assert f"does not fit {__name__}.Line: value is a dict" in out
        assert "(field 'qty' is missing)" in out
        h = await mismatched_signal.start()
        await h.waiting()
        await engine.signal("approve:bad", {"by": "bo", "ok": "maybe"})
        out = await result(h)
        assert f"the signal 'approve:bad' run {h.run_id!r} waited for" in out
        assert "Approval" in out
        assert "ok" in out
        p = await publishes.start()
        await result(p)
        with pytest.raises(TypeMismatch) as e:
            await p.get("count", type=int)
        assert e.value.what == f"the value run {p.run_id!r} published under 'count'"
        assert e.value.expected == "int"
        assert await p.get("count", type=str) == "seven"


@pytest.mark.parametrize("codec", CODECS)
async def test_a_mismatched_argument_fails_the_run_naming_it(
    make_objects: Factory, clock: MockClock, codec: str
) -> None:
    async with make_engine(make_objects, clock, codec=codec):
        # Not what the annotation says (a caller without a type checker).
        h = await typed_flow.start({"id": "o"}, customer())  # type: ignore[arg-type]
        # Rebuilt as itself (auto), or a WorkflowFailed standing for it (msgpack).
        with pytest.raises(durable.WorkflowError, match=rf"argument 'o' of run '{h.run_id}'") as e:
            await result(h)
        assert failure_type(e.value) == "TypeMismatch"
        assert "field 'lines' is missing" in str(e.value)


# ---------------------------------------------------------- conversions


def test_to_plain_and_from_plain_cover_nesting_optional_and_containers() -> None:
    value = [Receipt(order(), customer(), Approval(by="a", ok=False), Point(3, 4), [None])]
    plain = to_plain(value)
    assert plain[0]["order"]["lines"][0] == {"sku": "pen", "qty": 2}
    assert plain[0]["customer"]["tier"] == "gold"
    assert plain[0]["where"] == (3, 4)
    assert from_plain(plain, list[Receipt], "v") == value
    meta = from_plain({"source": "s", "at": [1, 2]}, Meta, "v")
    assert meta == {"source": "s", "at": Point(1, 2)}
    assert type(meta["at"]) is Point
    assert from_plain(None, Order | None, "v") is None
    assert from_plain({"k": [{"sku": "a", "qty": 1}]}, dict[str, list[Line]], "v") == {
        "k": [Line("a", 1)]
    }
    assert from_plain(("gold", "basic"), tuple[Tier, ...], "v") == (Tier.GOLD, Tier.BASIC)
    # Without type=, a value whose annotation needs no conversion passes as it is.
    assert from_plain("x", int, "v") == "x"
    with pytest.raises(TypeMismatch, match=r"^v does not fit int: value is a str, not a int$"):
        from_plain("x", int, "v", strict=True)
    with pytest.raises(TypeMismatch, match=r"value\[1\]\.qty is a str"):
        from_plain([{"sku": "a", "qty": 1}, {"sku": "b", "qty": "2"}], list[Line], "v", strict=True)
    with pytest.raises(TypeMismatch, match=r"no field 'colour'"):
        from_plain({"sku": "a", "qty": 1, "colour": "red"}, Line, "v")
    with pytest.raises(TypeMismatch, match=r"'silver' is not one of its values"):
        from_plain("silver", Tier, "v")


def test_msgpack_still_refuses_what_has_no_plain_form_naming_its_place() -> None:
    @dataclass
    class Holder:
        tags: set[str]

    with pytest.raises(CodecError, match=r"value\[0\]\['tags'\] is a set"):
        Codec(mode="msgpack").dumps([Holder({"a"})], what="x")


def test_pydantic_is_never_imported_by_durable() -> None:
    code = textwrap.dedent(
        """
        import sys, dataclasses
        import durable
        from durable.decorators.codec import Codec
        from durable.decorators.typed import from_plain

        @dataclasses.dataclass
        class D:
            a: int

        codec = Codec(mode="msgpack")
        value = codec.loads(codec.dumps(D(1), what="x"), what="x")
        assert from_plain(value, D, "x") == D(1)
        assert "pydantic" not in sys.modules, "pydantic was imported"
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr

"""Typed values: dataclasses and Pydantic models through ``codec="msgpack"``.

    python -m examples.typed_values [DIR]

The engine stores plain data only (``codec="msgpack"``: no pickles), yet
the workflow takes a dataclass, its steps return dataclasses and a
Pydantic model, a signal carries a model and the run publishes one: the
codec stores each as plain data, and each is validated back into its type
where it is read, from the annotations (a parameter's, a result's) or from
``type=`` (``wait_for_signal``, ``handle.get``). ``mypy --strict`` infers
every type below (``pyproject.toml`` checks the examples).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from durable import Engine, publish, step, wait_for_signal, workflow
from examples._store_dir import run_with_store


@dataclass
class Line:
    """An order line."""

    sku: str
    qty: int
    cents: int


@dataclass
class Order:
    """An order: its id and lines."""

    id: str
    lines: list[Line]
    note: str | None = None


class Approval(BaseModel):
    """Who approved the order (a signal's value)."""

    by: str
    limit_cents: int


class Invoice(BaseModel):
    """What the workflow returns."""

    order_id: str
    total_cents: int
    lines: list[tuple[str, int]]
    approved_by: str | None = None


@step
def price(order: Order) -> list[Line]:
    """A sync step: the lines with a 10 % discount (a dataclass list in, out)."""
    return [Line(x.sku, x.qty, x.cents * 9 // 10) for x in order.lines]


@step
async def invoice(order: Order, lines: list[Line], approval: Approval) -> Invoice:
    """An async step returning a model."""
    total = sum(x.qty * x.cents for x in lines)
    return Invoice(
        order_id=order.id,
        total_cents=total,
        lines=[(x.sku, x.qty) for x in lines],
        approved_by=approval.by,
    )


@workflow
async def checkout(order: Order) -> Invoice:
    """Price the order, publish the priced lines, wait for an approval."""
    assert isinstance(order, Order)  # a dataclass again, not a dict
    lines = await price(order)
    await publish("priced", lines)
    approval = await wait_for_signal(f"approve:{order.id}", type=Approval)
    return await invoice(order, lines, approval)


async def main(store: Path) -> None:
    order = Order("o-7", [Line("pen", 3, 250), Line("ink", 1, 1200)], note="gift")
    async with Engine(store, codec="msgpack") as engine:
        started = await checkout.start(order)
        handle = checkout.handle(started.run_id)  # typed: WorkflowHandle[Invoice]
        priced = await handle.get("priced", type=list[Line])
        print(f"priced: {priced}")
        await handle.waiting()
        await engine.signal(f"approve:{order.id}", Approval(by="ana", limit_cents=10_000))
        result = await handle.result()
        print(f"result: {type(result).__name__} {result.model_dump()}")
        raw = await engine.handle(started.run_id).result()
        print(f"as stored (engine.handle, untyped): {type(raw).__name__} {sorted(raw)}")


if __name__ == "__main__":
    run_with_store(main)

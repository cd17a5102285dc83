from __future__ import annotations

from saga import Coordinator, Saga, SagaStatus, StepContext


def test_declarative_saga_completes_and_stores_results(coord: Coordinator) -> None:
    order = Saga("smoke-order")

    @order.step()
    def reserve(ctx: StepContext) -> dict[str, str]:
        return {"reservation": ctx.data["sku"]}

    @order.step()
    def charge(ctx: StepContext) -> int:
        return len(ctx.results["reserve"]["reservation"])

    coord.register(order)
    result = coord.run(order, data={"sku": "A1"}, key="k1")
    assert result.status is SagaStatus.COMPLETED
    assert result.results == {"reserve": {"reservation": "A1"}, "charge": 2}
    assert coord.get(result.id).results == result.results

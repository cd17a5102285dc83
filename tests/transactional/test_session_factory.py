"""The application's own sessionmaker for transactional steps, and the database check."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlmodel
from saga.adapters.integrations.sqlalchemy import install_session_factory, same_database
from sqlalchemy import Engine, create_engine, insert, select
from sqlalchemy.orm import Session, sessionmaker
from sqlmodel import Field, SQLModel

from saga import AsyncCoordinator, ConfigurationError, Coordinator, Saga, StepContext
from tests.transactional import app


class TxOrder(SQLModel, table=True):
    __tablename__ = "tx_orders"

    id: int | None = Field(default=None, primary_key=True)
    saga_id: str
    item: str


seen: list[type] = []
orders = Saga("tx-orders")


@orders.step(transactional=True)
def place(ctx: StepContext) -> dict[str, int]:
    seen.append(type(ctx.session))
    order = TxOrder(saga_id=ctx.saga_id, item=ctx.data["item"])
    ctx.session.add(order)
    ctx.session.flush()
    assert order.id is not None
    return {"order": order.id}


@pytest.fixture
def app_engine(db_url: str) -> Iterator[Engine]:
    engine = create_engine(db_url)
    SQLModel.metadata.create_all(engine, tables=[TxOrder.__table__])  # type: ignore[list-item]
    yield engine
    engine.dispose()


def _orders(engine: Engine) -> list[tuple[str, str]]:
    with sqlmodel.Session(engine) as session:
        return [(o.saga_id, o.item) for o in session.exec(sqlmodel.select(TxOrder))]


def test_steps_get_sessions_from_the_applications_sqlmodel_sessionmaker(
    db_url: str, app_engine: Engine
) -> None:
    seen.clear()
    factory = sessionmaker(app_engine, class_=sqlmodel.Session, expire_on_commit=False)

    with Coordinator(db_url, session_factory=factory) as coord:
        view = coord.run(orders, data={"item": "book"})

    assert issubclass(seen[0], sqlmodel.Session)
    assert _orders(app_engine) == [(view.id, "book")]
    assert view.steps[0].result == {"order": 1}


def test_factory_installed_on_a_running_async_coordinator(db_url: str, app_engine: Engine) -> None:
    seen.clear()

    async def scenario() -> str:
        async with AsyncCoordinator(db_url) as coord:
            install_session_factory(coord, sessionmaker(app_engine, class_=sqlmodel.Session))
            return (await coord.run(orders, data={"item": "pen"})).id

    saga_id = asyncio.run(scenario())

    assert issubclass(seen[0], sqlmodel.Session)
    assert _orders(app_engine) == [(saga_id, "pen")]


def test_factory_bound_to_another_sqlite_file_is_refused(tmp_path: Path) -> None:
    other = create_engine(f"sqlite:///{tmp_path}/shop.db")

    with pytest.raises(ConfigurationError) as refused:
        Coordinator(f"sqlite:///{tmp_path}/saga.db", session_factory=sessionmaker(other))

    message = str(refused.value)
    assert "shop.db" in message
    assert "saga.db" in message
    assert "saga store's database" in message
    other.dispose()


@pytest.mark.postgres
def test_factory_bound_to_another_postgres_database_is_refused_without_its_password(
    pg_url: str,
) -> None:
    other = create_engine("postgresql+psycopg://shop:s3cret@127.0.0.1:5432/shop")
    with Coordinator(pg_url) as coord:
        with pytest.raises(ConfigurationError) as refused:
            install_session_factory(coord, sessionmaker(other))
        assert coord.store.session_factory is Session  # type: ignore[attr-defined]

    assert "/shop" in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_factory_routing_tables_elsewhere_is_refused(db_url: str, app_engine: Engine) -> None:
    factory = sessionmaker(binds={TxOrder: app_engine})

    with pytest.raises(ConfigurationError, match="binds"):
        Coordinator(db_url, session_factory=factory)


def test_session_factory_on_the_memory_store_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="PostgreSQL or SQLite"):
        Coordinator("memory://", session_factory=sessionmaker())


def test_unbound_factory_is_accepted_and_bound_to_the_store(db_url: str) -> None:
    app.create_tables(db_url)
    saga = Saga("tx-unbound")

    @saga.step(transactional=True)
    def write(ctx: StepContext) -> int:
        return app.write_effect(ctx, "do")

    with Coordinator(db_url, session_factory=sessionmaker()) as coord:
        coord.run(saga)

    assert [r.kind for r in app.read_effects(db_url)] == ["do"]


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ("postgresql+psycopg://a@localhost/app", "postgresql://b:pw@127.0.0.1:5432/app", True),
        ("postgresql+psycopg://a@localhost/app", "postgresql+psycopg://a@localhost/other", False),
        ("postgresql+psycopg://a@db1/app", "postgresql+psycopg://a@db2/app", False),
        ("postgresql+psycopg://a@localhost:5433/app", "postgresql://a@localhost/app", False),
        ("sqlite:///shop.db", "sqlite:///./shop.db", True),
        ("sqlite:///shop.db", "sqlite:///saga.db", False),
        ("sqlite://", "sqlite://", False),
        ("sqlite:///shop.db", "postgresql://a@localhost/shop.db", False),
    ],
)
def test_same_database_compares_what_names_a_database(left: str, right: str, same: bool) -> None:
    assert same_database(left, right) is same


def test_effect_written_with_plain_insert_through_factory_session(
    db_url: str, app_engine: Engine
) -> None:
    saga = Saga("tx-core-insert")

    @saga.step(transactional=True)
    def add(ctx: StepContext) -> None:
        ctx.session.execute(insert(TxOrder).values(saga_id=ctx.saga_id, item="core"))

    with Coordinator(db_url, session_factory=sessionmaker(app_engine)) as coord:
        view = coord.run(saga)

    with app_engine.connect() as connection:
        assert connection.execute(select(TxOrder.item)).scalars().all() == ["core"]  # type: ignore[call-overload]
    assert view.status.value == "completed"

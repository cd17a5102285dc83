"""Alembic's entry point: configured by saga.adapters.sql.migrate, never run by hand."""

from saga.adapters.sql.migrate import run_environment

run_environment()

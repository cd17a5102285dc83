"""saga's Alembic migrations, run by :mod:`saga.adapters.sql.migrate` (no alembic.ini)."""

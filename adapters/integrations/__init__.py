"""Integrations with the libraries sagas usually talk to.

- :mod:`saga.adapters.integrations.sqlalchemy`: the application's own
  ``sessionmaker`` (SQLAlchemy or SQLModel) for transactional steps.
- :mod:`saga.adapters.integrations.http`: httpx calls that carry the step's
  idempotency key and turn "try again later" answers into retried errors
  (needs the ``http`` extra).
- :mod:`saga.adapters.integrations.outbox`: messages written in a
  transactional step's transaction, published afterwards by a relay.
- :mod:`saga.adapters.integrations.fencing`: a participant database's record
  of each effect, applied or undone, that refuses a zombie's late call.

Each module is imported only when asked for; none is needed by the core.
"""

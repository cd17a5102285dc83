"""saga's implementation: private, and free to move between releases.

What users import is in ``saga`` (its ``__all__``), ``saga.admin``, ``saga.web``,
``saga.testing``, ``saga.logs``, ``saga.otel``, ``saga.metrics`` and
``saga.adapters.integrations``; an old import path of a module that moved here
keeps working for a release, with a ``DeprecationWarning`` (see ``moved``).
"""

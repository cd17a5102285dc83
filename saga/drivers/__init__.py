"""The two drivers that answer the engine's effects: threads and asyncio tasks.

:class:`~saga.drivers.threads.ThreadDriver` serves ``Coordinator``;
:class:`~saga.drivers.tasks.TaskDriver` serves ``AsyncCoordinator``. Neither
decides anything: every decision is the flow's (:mod:`saga.engine`).
"""

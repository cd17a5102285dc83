"""The two drivers that answer the engine's effects: threads and asyncio tasks.

:class:`~saga._internal.drivers.threads.ThreadDriver` serves ``Coordinator``;
:class:`~saga._internal.drivers.tasks.TaskDriver` serves ``AsyncCoordinator``. Neither
decides anything: every decision is the flow's (:mod:`saga._internal.engine`).
"""

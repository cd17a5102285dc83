"""Old import paths of the modules that moved into ``saga._internal``.

Until release 0.2 every module sat at the top of ``saga``; only the names in
``saga.__all__`` (and the public subpackages) were ever the contract, but code
that imported ``saga._internal.coordinator`` or ``saga._internal.errors`` keeps working for a
release: such an import gives the very module now in ``saga._internal`` (one
module object, so classes and registries are shared) with a
``DeprecationWarning`` saying where it went.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # the ABC's module imports importlib.resources: not at run time
    from importlib.abc import Loader

MOVED = frozenset(
    {
        "_secrets", "_statuses", "aio", "aio_scope", "codec", "context", "coordinator",
        "definition", "delivery", "demo", "demo_steps", "drivers", "engine", "errors",
        "explanation", "failure", "faults", "known_functions", "lease", "lifecycle",
        "listening", "operator_identity", "policy", "ports", "record", "recovery", "refs",
        "resource_view", "resources", "result_types", "scope", "settings", "status", "store",
        "transient", "typed", "versions", "views", "wording",
    }
)  # fmt: skip
"""The modules (and packages) that were ``saga.<name>`` before they moved."""


class OldPaths:
    """Answers an import of ``saga.<moved>[.sub]`` with ``saga._internal.<moved>[.sub]``."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,  # noqa: ARG002 - the finder protocol's
        target: ModuleType | None = None,  # noqa: ARG002
    ) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != "saga" or parts[1] not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self))  # its own loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = "saga._internal." + spec.name.removeprefix("saga.")
        warnings.warn(
            f"{spec.name} moved to {new}, which is internal: import the public names "
            "from saga (its __all__) instead",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._spec = module.__spec__  # put back after the import system set the old one
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec


def install() -> None:
    """Answer the old paths first, before the path finder could load a second copy."""
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPaths())

"""``python -m tests.upgrade.versions_child URL DIR N``: release 1 only (versions_v1 is
the only definition imported) starts N sagas that block in their credit step until
the parent SIGKILLs the process."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from saga import Coordinator
from tests.upgrade import versions_v1


def main() -> None:
    url, folder, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    coord = Coordinator(url, lease_ttl=1.0)
    for i in range(count):
        data = {"dir": folder, "tag": f"old-{i}", "block": "credit"}
        run = lambda data=data: coord.run(versions_v1.transfer, data, key=data["tag"])  # noqa: E731
        threading.Thread(target=run, daemon=True).start()
    print("started", Path(folder), flush=True)
    threading.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    main()

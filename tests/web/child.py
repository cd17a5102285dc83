"""``python -m tests.web.child URL READY``: run ``web-hang`` until killed (see steps.py)."""

from __future__ import annotations

import sys

from saga import Coordinator
from tests.web.steps import HANG


def main(url: str, ready: str) -> None:
    coord = Coordinator(url, lease_ttl=1.0)
    coord.run(HANG, data={"ready": ready}, key="hang-1")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

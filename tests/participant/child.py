"""The first owner of a fenced order, in a process of its own (tests/participant/sagas.py).

    python -m tests.participant.child STORE_URL PARTICIPANT_URL KEY

Runs the order with ``freeze`` on a short lease; ``reserve`` stops the process
with SIGSTOP before it calls the participant. Once continued it prints how it
ended, as one JSON line.
"""

from __future__ import annotations

import json
import sys

from saga import Coordinator, LeaseLostError, SagaFailed
from tests.participant import sagas


def main(store: str, participant: str, key: str) -> None:
    data = {"participant": participant, "sku": "mug", "freeze": True}
    with Coordinator(store, lease_ttl=0.5) as coord:
        try:
            view = coord.run(sagas.order, data=data, key=key)
            ended = {"status": view.status.value}
        except LeaseLostError as lost:
            ended = {"error": "LeaseLostError", "epoch": lost.epoch}
        except SagaFailed as failed:
            ended = {"status": failed.status.value}
    print(json.dumps(ended), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])

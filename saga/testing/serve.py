"""``python -m saga.testing.serve [MODULE...]``: the fork server (:mod:`saga.testing.forkserver`),
preloading the modules named."""

import sys

from saga.testing.forkserver import serve

if __name__ == "__main__":
    serve(sys.argv[1:])

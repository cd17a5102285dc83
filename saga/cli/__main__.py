"""``python -m saga.cli``: the ``saga`` command, where the console script is not installed."""

from saga.cli import main

if __name__ == "__main__":
    main()

"""``python -m saga``: the admin command, for hosts where the ``saga`` script is not
on the PATH."""

from saga.cli import main

main()

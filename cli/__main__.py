"""``python -m logstore.cli``: the same as the ``logstore`` command."""

from .main import main

main(prog_name="logstore")

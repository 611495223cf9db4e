"""``python -m vsekit ...`` (and ``torchrun -m vsekit ...``) runs the command line."""

from vsekit.cli import main

main()

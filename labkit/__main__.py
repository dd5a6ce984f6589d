"""`python -m labkit` runs the CLI."""

from labkit.cli import main

main()

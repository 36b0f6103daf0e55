"""`python -m caption.cli`: the `caption` command."""

from caption.cli import main

main()

"""``python -m gpupred.cli``: the ``gpupred`` command."""

from gpupred.cli import main

main()

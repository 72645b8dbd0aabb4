"""``python -m dphypo`` runs the command line."""

from dphypo.cli import main

main()

"""``python -m liftbridge_client.cli``: the same as the ``liftbridge`` command."""

from liftbridge_client.cli import main

main()

"""``python -m modelsql``: the shell (:func:`modelsql.client.cli.main`), as the ``modelsql`` command."""

import sys

from modelsql.client.cli import main

if __name__ == "__main__":
    sys.exit(main())

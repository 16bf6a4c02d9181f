"""``python -m edgeway`` and the ``edgeway`` command: ``serve``'s listeners are bound before
anything else is imported (``early``), then the command line runs (``cli``)."""

import os
import sys

from edgeway import early


def main() -> None:
    early.prebind(sys.argv[1:], os.environ)
    from edgeway.cli import main as run  # (the imports a command needs: a second or so)

    run()


if __name__ == "__main__":
    main()

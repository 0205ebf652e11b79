"""``python -m sandboxfs``: the same as the ``sandboxfs`` command."""

import sys

from sandboxfs.cli import main

sys.exit(main())

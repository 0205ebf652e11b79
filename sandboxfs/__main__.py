"""``python -m sandboxfs``: the same as the ``sandboxfs`` command."""

import sys

from sandboxfs.cli.launch import main

sys.exit(main())

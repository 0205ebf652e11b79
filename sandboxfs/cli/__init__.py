"""The ``sandboxfs`` command: the launcher and the command line."""

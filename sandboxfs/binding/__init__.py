"""Binding wrappers: the only code that touches the compiled shim (``sandboxfs._native``).

Each wrapper makes one syscall safe to call from Python (``-errno`` becomes
:class:`OSError`, NUL bytes in names are refused).  No policy lives here.
"""

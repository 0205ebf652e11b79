"""The confinement core: where a client path becomes a descriptor, and nothing else.

Lexical mapping of request paths onto the allowed directories, the allowed
directories themselves, resolution in the kernel beneath their descriptors, the
one exception tree that client-facing errors come from, and Landlock, the
second layer.  Nothing here imports the filesystem operations, the tools or
the protocol.
"""

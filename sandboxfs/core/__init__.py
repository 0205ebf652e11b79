"""The confinement core: where a client path becomes a descriptor, and nothing else.

Lexical mapping of request paths onto the allowed directories, the allowed
directories themselves, resolution in the kernel beneath their descriptors, the
one exception tree that client-facing errors come from, and Landlock, the
second layer.  Nothing here imports the filesystem operations, the tools or
the protocol.
"""

from __future__ import annotations

from sandboxfs.binding import LEAF_BINARY as LEAF_BINARY
from sandboxfs.binding import LEAF_GONE as LEAF_GONE
from sandboxfs.binding import LEAF_LATER as LEAF_LATER
from sandboxfs.binding import LEAF_SEARCH as LEAF_SEARCH
from sandboxfs.binding import LEAF_TEXT as LEAF_TEXT
from sandboxfs.binding import LeafBatch as LeafBatch
from sandboxfs.binding import Statx as Statx
from sandboxfs.binding import count_byte as count_byte
from sandboxfs.binding import find as find
from sandboxfs.binding import syscalls as syscalls
from sandboxfs.core import landlock as landlock
from sandboxfs.core import seccomp as seccomp
from sandboxfs.core.allowlist import AllowList as AllowList
from sandboxfs.core.allowlist import Root as Root
from sandboxfs.core.chokepoint import LIST_FLAGS as LIST_FLAGS
from sandboxfs.core.chokepoint import READ_FLAGS as READ_FLAGS
from sandboxfs.core.chokepoint import Confinement as Confinement
from sandboxfs.core.chokepoint import CrossesMount as CrossesMount
from sandboxfs.core.chokepoint import Directory as Directory
from sandboxfs.core.chokepoint import Handle as Handle
from sandboxfs.core.chokepoint import Location as Location
from sandboxfs.core.chokepoint import ParentDir as ParentDir
from sandboxfs.core.chokepoint import same_file as same_file
from sandboxfs.core.errors import QUOTED_CHARS as QUOTED_CHARS
from sandboxfs.core.errors import AccessDenied as AccessDenied
from sandboxfs.core.errors import AlreadyExists as AlreadyExists
from sandboxfs.core.errors import Conflict as Conflict
from sandboxfs.core.errors import HardLinked as HardLinked
from sandboxfs.core.errors import InvalidArgument as InvalidArgument
from sandboxfs.core.errors import InvalidPath as InvalidPath
from sandboxfs.core.errors import IsADirectory as IsADirectory
from sandboxfs.core.errors import LimitExceeded as LimitExceeded
from sandboxfs.core.errors import NotADirectory as NotADirectory
from sandboxfs.core.errors import NotARegularFile as NotARegularFile
from sandboxfs.core.errors import NotFound as NotFound
from sandboxfs.core.errors import PolicyDenied as PolicyDenied
from sandboxfs.core.errors import SandboxError as SandboxError
from sandboxfs.core.errors import TimedOut as TimedOut
from sandboxfs.core.errors import Unsupported as Unsupported
from sandboxfs.core.errors import errno_error as errno_error
from sandboxfs.core.errors import errno_words as errno_words
from sandboxfs.core.errors import quoted as quoted
from sandboxfs.core.globs import Glob as Glob
from sandboxfs.core.globs import GlobError as GlobError
from sandboxfs.core.globs import compile_glob as compile_glob
from sandboxfs.core.mounts import MountTable as MountTable
from sandboxfs.core.names import has_lone_surrogate as has_lone_surrogate
from sandboxfs.core.names import quote_name as quote_name
from sandboxfs.core.names import quote_names as quote_names
from sandboxfs.core.names import quote_path as quote_path
from sandboxfs.core.names import structured_name as structured_name
from sandboxfs.core.names import structured_names as structured_names
from sandboxfs.core.names import structured_path as structured_path
from sandboxfs.core.pathnames import MAX_PATH_BYTES as MAX_PATH_BYTES
from sandboxfs.core.pathnames import absolute_request as absolute_request
from sandboxfs.core.pathnames import join as join
from sandboxfs.core.policy import OPEN as OPEN
from sandboxfs.core.policy import Policy as Policy
from sandboxfs.core.policy import PolicyRefusal as PolicyRefusal
from sandboxfs.core.resolver import Resolver as Resolver
from sandboxfs.core.roots import local_path as local_path
from sandboxfs.core.roots import roots_from_uris as roots_from_uris
from sandboxfs.core.traversal import ENTER as ENTER
from sandboxfs.core.traversal import ENTRY as ENTRY
from sandboxfs.core.traversal import LEAVE as LEAVE
from sandboxfs.core.traversal import RUN as RUN
from sandboxfs.core.traversal import TOO_DEEP as TOO_DEEP
from sandboxfs.core.traversal import TOO_MANY as TOO_MANY
from sandboxfs.core.traversal import UNREADABLE as UNREADABLE
from sandboxfs.core.traversal import Bounds as Bounds
from sandboxfs.core.traversal import Rel as Rel
from sandboxfs.core.traversal import Step as Step
from sandboxfs.core.traversal import Traversal as Traversal
from sandboxfs.core.watch import NO_WATCH as NO_WATCH
from sandboxfs.core.watch import Stall as Stall
from sandboxfs.core.watch import StepWatch as StepWatch
from sandboxfs.core.watch import Watch as Watch

"""The chokepoint: the one module that opens anything on a client's behalf.

Every ``openat2`` sandboxfs makes goes through :meth:`Confinement.open`, and the
resolve flags of every call come from :meth:`Confinement.flags`, read from the
three module constants below at call time:

* :data:`ALWAYS` (``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``) on every call: the
  kernel refuses anything that would leave the starting descriptor (``..``,
  absolute symlinks, symlinks that climb out) and every procfs magic link;
* :data:`CROSSING` (``RESOLVE_NO_XDEV``) on every call of a server run with
  ``--no-xdev``: no component may cross a mount point;
* :data:`EXACT` (``RESOLVE_NO_SYMLINKS``) on *exact* opens: a leaf name under a
  parent descriptor, a child named by a directory listing, the canonical
  location of something already resolved.  No symlink is followed there, not
  even one that stays inside.  No ``O_NOFOLLOW`` is added on top: this flag is
  the one mechanism that keeps a leaf from being followed.

The descriptors come wrapped in three owned types:

* :class:`Handle`: an ``O_PATH`` descriptor of one object, the :class:`Location`
  that reopens it and its ``fstat``.  :meth:`Handle.reopen` opens the same object
  for I/O and refuses (:class:`~sandboxfs.core.errors.Conflict`) if the location
  now names another one.  Facts about a client path come from one handle.
* :class:`Directory`: a descriptor of a directory with the ``*at`` operations on
  single entry names in it.
* :class:`ParentDir`: a directory and one checked leaf name: every mutation acts
  on exactly that one name.

The policy of each allowed directory (:mod:`sandboxfs.core.policy`: read-only,
hidden and protected patterns) is enforced here, on the location of every open,
every listing and every ``*at`` change, before the system call: a hidden
location is absent (``ENOENT``, and left out of listings), a change the policy
does not allow raises :class:`~sandboxfs.core.policy.PolicyRefusal` with nothing
done.  Under a policy with patterns every open is exact, so only canonical
(symlink-free) locations are judged: a symlink cannot reach a hidden or
protected entry under another name (the resolver's component walk follows it,
one judged component at a time).  A rename of a directory is refused if any
entry below it is hidden or protected where it is or would be where it goes.

Methods raise :class:`OSError` for what the kernel refused; callers turn it into
a client-safe error with :meth:`Confinement.error` (the one converter,
:func:`~sandboxfs.core.errors.from_oserror`).

This is one package on purpose: every ``openat2`` (in ``confinement``, the one
caller, with the resolve flags) and every ``*at`` call on a client's behalf (in
``directory``: :class:`Handle` and :class:`Directory`; ``parent``: :class:`ParentDir`)
is here, with the policy's check before each of them, so that one package is what to
read, and a test can pin that nothing else makes them.
"""

from __future__ import annotations

from sandboxfs.core.chokepoint.confinement import ALWAYS as ALWAYS
from sandboxfs.core.chokepoint.confinement import CROSSING as CROSSING
from sandboxfs.core.chokepoint.confinement import EAGAIN_RETRIES as EAGAIN_RETRIES
from sandboxfs.core.chokepoint.confinement import EXACT as EXACT
from sandboxfs.core.chokepoint.confinement import LIST_FLAGS as LIST_FLAGS
from sandboxfs.core.chokepoint.confinement import READ_FLAGS as READ_FLAGS
from sandboxfs.core.chokepoint.confinement import Confinement as Confinement
from sandboxfs.core.chokepoint.confinement import CrossesMount as CrossesMount
from sandboxfs.core.chokepoint.confinement import Location as Location
from sandboxfs.core.chokepoint.confinement import same_file as same_file
from sandboxfs.core.chokepoint.directory import SUBTREE_CHECK_DEPTH as SUBTREE_CHECK_DEPTH
from sandboxfs.core.chokepoint.directory import SUBTREE_CHECK_ENTRIES as SUBTREE_CHECK_ENTRIES
from sandboxfs.core.chokepoint.directory import Directory as Directory
from sandboxfs.core.chokepoint.directory import Handle as Handle
from sandboxfs.core.chokepoint.parent import ParentDir as ParentDir
from sandboxfs.core.chokepoint.parent import open_root_beneath as open_root_beneath

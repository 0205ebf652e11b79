"""stderr for people or for machines: ``--log-format text|json``.

Once the configuration is decided, every line the server writes on stderr goes
through one :class:`LineWriter`: each line is written whole, under one lock, so
the operator's log, the audit log, threads and (in the tenants' front) the
workers' relayed lines never interleave mid-line.

Two kinds of line, told apart by the field ``log``:

* operator lines (``"log": "operator"``): what the server says to its operator;
* audit lines (``"log": "audit"``): one per tool call
  (:mod:`sandboxfs.session.auditlog`), always JSON.

With ``json`` every line is one JSON object: ``{"time", "log", "level", "message"}``
(and ``"tenant"`` for a tenant's worker, ``"logger"`` for a library's line,
``"exception"`` for a traceback at debug level).  With ``text`` an operator line
is its message alone, as before, any further line of it indented.  Either way
client text stays escaped: JSON is written ASCII-only (every control and non-ASCII
character as ``\\uXXXX``), and in text a control character other than a message's
own line breaks is written as ``\\x1b``, ``\\r``...; a traceback follows its
line indented with ``  | ``: no line can pass for another.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal, final

LogFormat = Literal["json", "text"]

#: Made once, ASCII-only: client text never reaches a terminal or a collector raw.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=True, default=str)
#: Characters a text line shows escaped: C0 controls, DEL and C1 controls.
_ESCAPES: Final = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def escape_text(text: str) -> str:
    """``text`` on one line: control characters escaped, lone surrogates (bytes
    that were not UTF-8) as ``\\udcXX``."""
    escaped = text.translate(_ESCAPES)
    if escaped.isascii():
        return escaped
    return escaped.encode("utf-8", "backslashreplace").decode("utf-8")


def text_lines(message: str) -> list[str]:
    """An operator message as text lines: its first line at the margin, every further
    line indented (a message's own lines, as in a list of directories, already are),
    so none can pass for a line of its own; control characters escaped."""
    first, *rest = message.split("\n")
    lines = [escape_text(first)]
    for line in rest:
        shown = escape_text(line)
        lines.append(shown if shown.startswith(" ") else "  " + shown)
    return lines


def timestamp(now: float | None = None) -> str:
    """UTC, ISO 8601 with milliseconds."""
    now = time.time() if now is None else now
    second = int(now)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{text}.{int((now - second) * 1000):03d}+00:00"


@final
class LineWriter:
    """Whole lines to one descriptor (stderr): each written in full, under a lock,
    before the next begins."""

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd
        self._lock = threading.Lock()
        #: A file whose POSIX record lock the processes sharing ``fd`` take around
        #: each line (:meth:`share_with_forks`), or None for this process alone.
        self._shared: int | None = None

    def forked(self) -> None:
        """Called in a forked child."""
        # A thread of the parent may have held the lock at the fork: it is not held
        # in the child, whose only thread is the one that forked.
        self._lock = threading.Lock()

    def share_with_forks(self) -> None:
        """From now on this process and those it forks write each line whole, one at
        a time (``--workers``: a line longer than a pipe's atomic write, or a write cut
        short, would otherwise interleave with another process's).  The lock is a
        POSIX record lock on an anonymous file: it belongs to each process, is taken
        by the forks on the descriptor they inherit, and goes with a process that
        dies holding it."""
        if self._shared is None:
            self._shared = os.memfd_create("sandboxfs-log-lock", os.MFD_CLOEXEC)

    def write_line(self, line: str) -> None:
        """Write ``line`` and a newline (``line`` holds none)."""
        data = line.encode("utf-8", "backslashreplace") + b"\n"
        with self._lock, _held(self._shared):
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self.fd, view)
                except InterruptedError:
                    continue
                except BlockingIOError:
                    _wait_writable(self.fd)
                    continue
                except OSError:
                    return  # stderr is gone (a closed pipe): nothing can be said
                view = view[written:]

    # A text stream's two methods, so the audit log can write through it.
    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.write_line(line)
        return len(text)

    def flush(self) -> None:
        return None


@contextlib.contextmanager
def _held(shared: int | None) -> Iterator[None]:
    """The processes' lock on ``shared`` held (nothing when None)."""
    if shared is None:
        yield
        return
    try:
        fcntl.lockf(shared, fcntl.LOCK_EX)
    except OSError:
        yield  # no lock to be had: the line is written all the same
        return
    try:
        yield
    finally:
        fcntl.lockf(shared, fcntl.LOCK_UN)


def _wait_writable(fd: int) -> None:
    import select  # noqa: PLC0415 - only a non-blocking stderr that is full needs it

    select.select([], [fd], [])


def operator_record(
    message: str, level: str, *, extra: Mapping[str, Any] | None = None, when: float | None = None
) -> dict[str, Any]:
    """An operator line as a JSON object's fields."""
    record: dict[str, Any] = {"time": timestamp(when), "log": "operator", "level": level}
    if extra:
        record.update(extra)
    record["message"] = message
    return record


def encode(record: Mapping[str, Any]) -> str:
    """A JSON line, ASCII-only."""
    return _ENCODER.encode(record)


@final
class LineHandler(logging.Handler):
    """The logging handler of the ``sandboxfs`` command: each record one line (or, in
    text, one line and its indented traceback) through the writer."""

    def __init__(self, writer: LineWriter, log_format: LogFormat) -> None:
        super().__init__()
        self.writer = writer
        self.log_format = log_format

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.render(record)
        except Exception:  # a bad format string must not stop the server
            self.handleError(record)
            return
        self.writer.write_line(line)

    def render(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        trace = self._traceback(record)
        if self.log_format == "json":
            extra: dict[str, Any] = {}
            if record.name != "sandboxfs":
                extra["logger"] = record.name
            if trace:
                extra["exception"] = trace
            return encode(
                operator_record(message, record.levelname.lower(), extra=extra, when=record.created)
            )
        lines = text_lines(message)
        lines += [f"  | {escape_text(part)}" for part in trace.splitlines()]
        return "\n".join(lines)

    def _traceback(self, record: logging.LogRecord) -> str:
        if record.exc_info:
            return logging.Formatter().formatException(record.exc_info)
        return record.exc_text or ""


#: The writer every stderr line of this process goes through, once configured.
WRITER: Final = LineWriter()
os.register_at_fork(after_in_child=WRITER.forked)


def configure(level: str, log_format: LogFormat, *, quiet: tuple[str, ...] = ()) -> None:
    """Send every log record through :data:`WRITER` in ``log_format``; ``quiet``
    loggers (the libraries underneath) only from warnings on, unless at debug."""
    handler = LineHandler(WRITER, log_format)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    if level != "debug":
        for name in quiet:
            logging.getLogger(name).setLevel(logging.WARNING)


def relayed(line: bytes, tenant: str, log_format: LogFormat) -> str:
    """A line of a tenant's worker (which writes JSON) as the front writes it: with
    the tenant's name (a field, and in front of the message), in the front's format.
    A line that is not the worker's JSON (a crash's output) is an operator line."""
    text = line.decode("utf-8", "surrogateescape")
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("log") not in ("operator", "audit"):
        record = operator_record(text, "warning")
    prefixed = {**record, "tenant": tenant}
    if record.get("log") == "operator":
        prefixed["message"] = f"tenant {tenant}: {record.get('message', '')}"
    if log_format == "json" or record.get("log") == "audit":
        # The tenant's name comes first, after the two fields every line has.
        ordered = {k: prefixed[k] for k in ("time", "log") if k in prefixed}
        return encode({**ordered, "tenant": tenant, **prefixed})
    return "\n".join(text_lines(str(prefixed["message"])))


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False

"""Transports: stdio and streamable HTTP.  They move messages; the session decides."""

from __future__ import annotations

from sandboxfs.session import OUTCOMES as OUTCOMES
from sandboxfs.session import REASONS as REASONS
from sandboxfs.session import UNKNOWN_TOOL as UNKNOWN_TOOL
from sandboxfs.session import known_tools as known_tools
from sandboxfs.transports.http.connections import MAX_SEND_TIMEOUT as MAX_SEND_TIMEOUT
from sandboxfs.transports.http.connections import SEND_TIMEOUT as SEND_TIMEOUT
from sandboxfs.transports.http.credentials import hash_weakness as hash_weakness
from sandboxfs.transports.http.metrics import DURATION_BUCKETS as DURATION_BUCKETS
from sandboxfs.transports.http.metrics import METRICS_PATH as METRICS_PATH
from sandboxfs.transports.http.metrics import HttpMetrics as HttpMetrics
from sandboxfs.transports.http.metrics import ProcessMetrics as ProcessMetrics
from sandboxfs.transports.http.screening import NOSNIFF as NOSNIFF
from sandboxfs.transports.http.screening import HttpPolicy as HttpPolicy
from sandboxfs.transports.http.screening import misdirected as misdirected
from sandboxfs.transports.http.server import Gate as Gate
from sandboxfs.transports.http.server import Receive as Receive
from sandboxfs.transports.http.server import Scope as Scope
from sandboxfs.transports.http.server import Send as Send
from sandboxfs.transports.http.server import SidecarOptions as SidecarOptions
from sandboxfs.transports.http.server import bearer as bearer
from sandboxfs.transports.http.server import http_policy as http_policy
from sandboxfs.transports.http.server import serve_gate as serve_gate

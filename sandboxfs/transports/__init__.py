"""Transports: stdio and streamable HTTP.  They move messages; the session decides."""

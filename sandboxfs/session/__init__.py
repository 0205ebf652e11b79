"""The MCP session: the server's handshake, Roots, tool calls and their limits,
independent of how bytes travel."""

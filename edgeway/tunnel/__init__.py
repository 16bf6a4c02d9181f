"""The tunnel server: muxado sessions with agents, the RPC on top, the tunnel registry."""

"""The public edge: listeners, routing and forwarding."""

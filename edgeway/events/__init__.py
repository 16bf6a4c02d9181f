"""Events: change events written to an outbox with the change, traffic events from the edge
and the tunnel listener, and their delivery to the event destinations' targets."""

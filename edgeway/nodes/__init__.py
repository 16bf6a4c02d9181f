"""Nodes of one cluster: several ``edgeway serve`` processes sharing one PostgreSQL database.

- ``ca``: one platform CA for all of them, kept in the database (agents trust one CA, whichever
  node they reach);
- ``lease``: each node's row with its address, region and lease, renewed by heartbeats; a node
  whose lease ran out is gone, and the others remove what it recorded;
- ``link``: the mutual-TLS links between nodes, one muxado session each way, a stream per
  public connection carried to the node that holds the tunnel's agent;
- ``remote``: the tunnels of the other nodes in this node's registry, so the edge routes to
  them as to its own (modules, IP restrictions, events and logs run where the connection
  arrived; only the pipe to the agent crosses);
- ``cluster``: the above put together for ``edgeway serve``.

Changes reach every node by LISTEN/NOTIFY (``store.pgnotify``).
"""

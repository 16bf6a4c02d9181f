"""The Edgeway agent: config files, the client session, the local API."""

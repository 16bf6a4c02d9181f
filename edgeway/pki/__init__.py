"""Keys and certificates: X.509 parsing, SSH CA keys and certificate signing, sealing
private keys at rest."""

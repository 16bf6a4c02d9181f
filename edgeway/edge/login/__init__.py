"""End-user logins at the edge (the ``oauth``, ``oidc`` and ``saml`` modules, and the traffic
policy's login actions), one package whose imports run one way: ``base`` (what every login
shares), ``sessions`` and ``providers``, ``flow`` (what a flow is to the gate), ``code_flow``,
the flows ``oidc``, ``oauth`` and ``saml``, and ``gate`` on top."""

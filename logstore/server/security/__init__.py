"""Security: where clients connect and how, who they are, and what they may do.

It owns
- ``listeners``: ``PROTOCOL://HOST:PORT`` listeners with Kafka's protocol names (PLAINTEXT, SSL,
  SASL_PLAINTEXT, SASL_SSL) and the TLS settings and contexts of those that speak TLS;
- ``sasl``: each connection's ``Session`` (its principal), SaslHandshake and SaslAuthenticate (and
  the bare tokens of SaslHandshake v0), and the throttle that slows a host that keeps failing;
- ``scram``: the mechanisms (SCRAM-SHA-256/512 and PLAIN) and salted credentials; a new SASL
  mechanism goes here and into ``sasl``'s table;
- ``credentials`` (``scram-credentials.json``) and ``acl_store`` (``acls.json``), both written through
  ``checked_json`` (a checksummed JSON document replaced crash-safely);
- ``acls``: Kafka's ACL model and the ``Authorizer``;
- ``authorization``: Kafka's per-API ACL rules, applied to every decoded request before its handler.

May import: ``protocol`` and ``network`` (SASL answers its requests through a ``RequestContext``),
the foundations and the standard library. Never the handlers: they are above it.
"""

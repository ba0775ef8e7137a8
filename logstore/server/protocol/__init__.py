"""The Kafka protocol's messages: how a request or response is laid out, and the codec for them.

It owns ``schema`` (a message described as fields with version ranges, nullable versions and tags:
pure data), ``messages``, ``messages_admin``, ``messages_groups`` and ``messages_security`` (Kafka's
JSON message specs transcribed as field tables, and the registry of every API the server speaks with
its versions), ``codegen`` (straight-line decoder and encoder source per message and version),
``codec`` (the primitive wire types, request and response headers, frames, and every message body:
bytes in, values out) and ``errors`` (Kafka's error codes, and the one mapping of the store's
exceptions onto them).

A new API starts here: its field table in the ``messages*`` module of its family, registered with
the versions we serve. Nothing here touches a socket or the store.

May import: the foundations (``logstore.errors``) and the standard library. It is the lowest room of
the server: every other room may import it.
"""

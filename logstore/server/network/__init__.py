"""The network core: sockets, connections and the requests read from them.

It owns ``request_context`` (``Connection``: one client's socket, buffers and flags;
``RequestContext``: one request as the handlers see it, and the ways to finish it) and
``socket_server`` (``SocketServer``: Kafka's SocketServer and RequestChannel in one selector thread
and a pool of handler threads: accepting on every listener, TLS handshakes without blocking, framing,
answers in request order per connection, answers held back on a timer, idle connections closed)
and ``request_metrics`` (``RequestMetrics``: per-API request counts and total times, recorded by the
network thread as each request is answered).

It knows nothing of what a request means: a dispatch callable (``KafkaServer``'s: the SASL gate, then
``KafkaApis.handle``) gets every ``RequestContext``, and a session factory says who a new connection is.

May import: ``protocol`` (to read request headers and encode answers), the foundations and the
standard library.
"""

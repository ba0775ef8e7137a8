"""The request handlers: every API the server speaks mapped onto the store, one module per family.

It owns ``kafka_apis`` (``KafkaApis``: the dispatcher and its registry, ApiVersions, Metadata and
OffsetForLeaderEpoch; ``Broker``: what every handler shares), ``produce`` (Produce, InitProducerId,
the produce purgatory) with ``producer_state`` (idempotent producers' last batches and their
journal), ``fetch`` (Fetch and ListOffsets, the fetch purgatory's long poll), ``admin`` (topics,
configs, DeleteRecords), ``groups`` (the consumer-group APIs onto ``logstore.group``'s coordinator)
and ``security_admin`` (ACLs and SCRAM users through Kafka's admin APIs); ``topic_metrics``
(``BrokerTopicMetrics``: bytes and records in and out per topic, counted by produce and fetch).

A new API's handler goes in the module of its family and is registered with ``KafkaApis.register``
by ``KafkaServer``; its field table is ``protocol``'s, its ACL rule ``security.authorization``'s.

May import: every room below it (``protocol``, ``wire_records``, ``network``, ``security``), the
server's settings (``server_config``), the engine, ``group`` and the foundations.
"""

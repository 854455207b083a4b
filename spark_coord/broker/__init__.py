"""The broker: Kafka-wire data plane over partition logs, registered in ZooKeeper.

- ``server``/``connection``: asyncio TCP server, Kafka framing, ordered responses,
  sendfile for record sets, a seam for server-initiated requests.
- ``handlers``: one module per Kafka API (ApiVersions, Metadata, Produce, Fetch,
  ListOffsets, CreateTopics, DeleteTopics).
- ``state``: the cluster view kept in step with ZooKeeper; ``topics``: topic admin;
  ``registration``: ``/brokers/ids/<id>``; ``broker``: wiring; ``main``: the CLI.
"""

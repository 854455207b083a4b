"""Kafka's config resources: their names, types, defaults, validation and sources, and where they live.

What is served (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs; the
handlers are ``broker.handlers.describe_configs`` and its siblings):

- GROUP (``group``): Kafka 4.2's group configs (``share.auto.offset.reset``,
  ``share.isolation.level``, ``share.record.lock.duration.ms``, the session and
  heartbeat settings of consumer and share groups...), described with source
  GROUP_CONFIG where the group set them and DEFAULT_CONFIG (the broker's
  ``group.*`` value) elsewhere, changed with Kafka's validation against the
  broker's bounds, stored in ZooKeeper as ZooKeeper-mode Kafka stores entity
  configs (``/config/groups/<group>`` plus a ``/config/changes`` notification) and
  applied on every broker without a restart (``store``).
- TOPIC and BROKER (``broker``): described with the broker's real settings under
  Kafka's names and sources (STATIC_BROKER_CONFIG from the properties file or an
  ``--override``, DEFAULT_CONFIG otherwise); read-only for now.

Not served: BROKER_LOGGER and CLIENT_METRICS resources, dynamic broker configs,
per-topic overrides, and the group configs of features we do not have (streams
groups, ``share.renew.acknowledge.enable``).

The interface the group code uses is ``GroupConfigs`` (a broker's
``ctx.group_configs``): ``get(group_id) -> GroupConfig`` from memory,
``add_listener(fn)`` for changes, ``await delete(group_id)`` when a group goes;
``parse_by_duration`` reads a ``by_duration:`` reset.
"""

from spark_coord.configs.durations import parse_by_duration
from spark_coord.configs.group import GroupConfig, GroupConfigModel
from spark_coord.configs.model import (
                                       AlterConfigOp,
                                       ConfigEntry,
                                       ConfigResourceType,
                                       ConfigSource,
                                       ConfigType,
                                       InvalidConfig,
)

__all__ = ["AlterConfigOp", "ConfigEntry", "ConfigResourceType", "ConfigSource", "ConfigType", "GroupConfig",
           "GroupConfigModel", "InvalidConfig", "parse_by_duration"]

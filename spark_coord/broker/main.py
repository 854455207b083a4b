"""``spark-coord broker``: run one broker until SIGTERM/SIGINT, then stop cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal

from spark_coord import config as config_mod
from spark_coord.gc_pauses import start_from_config

log = logging.getLogger(__name__)

async def start_broker(cfg: config_mod.Config, stop: asyncio.Event | None = None):
    """A started ``Broker``, started again while its ZooKeeper session is lost mid-start
    (``zk.client.start_until_started``); None once ``stop`` is set first."""
    from spark_coord.broker.broker import Broker
    from spark_coord.zk.client import start_until_started

    return await start_until_started(lambda: Broker(cfg), f"broker {cfg['broker.id']}", stop)


async def serve(cfg: config_mod.Config) -> int:
    """Start a broker, wait for SIGTERM/SIGINT, stop it; returns the exit code."""
    from spark_coord.broker.registration import BrokerIdTaken
    from spark_coord.zk.client import ZooKeeperUnavailable

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        broker = await start_broker(cfg, stop)
    except (BrokerIdTaken, ZooKeeperUnavailable, OSError) as e:
        log.error("broker %d cannot start: %s", cfg["broker.id"], e)
        return 1
    if broker is None:
        return 0
    host, port = broker.advertised
    log.info("broker %d serving on %s:%d; stop with SIGTERM or Ctrl-C", broker.broker_id, host, port)
    freezer = start_from_config(cfg["gc.freeze.interval.ms"])  # full collections off the loop's hot path
    await stop.wait()
    log.info("broker %d stopping", broker.broker_id)
    if freezer is not None:
        freezer.stop()
    await broker.stop()
    return 0


def run_cli(args) -> int:
    """Entry point of ``spark-coord broker --config FILE --override k=v``."""
    from spark_coord.memory import keep_freed_memory

    cfg = config_mod.load(config_mod.BROKER, args.config, args.override)
    keep_freed_memory()  # request buffers reuse freed memory instead of fresh pages (spark_coord.memory)
    return asyncio.run(serve(cfg))

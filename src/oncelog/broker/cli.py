"""`oncelog broker start`: run a broker in the foreground, like kafka-server-start.sh."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from oncelog.broker.stuck_stop import watch_shutdown
from oncelog.config.broker import BrokerConfig, ConfigError, parse_overrides
from oncelog.errors import CommandError


def register(commands: argparse._SubParsersAction) -> None:
    broker = commands.add_parser("broker", help="run an oncelog broker")
    actions = broker.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser(
        "start",
        help="run a broker in the foreground until SIGTERM or SIGINT",
        description="Run a broker in the foreground. Settings use Apache Kafka's keys, read from "
        "a server.properties file and then from --override key=value, as kafka-server-start.sh does.",
    )
    start.add_argument("--config", type=Path, metavar="FILE", help="a server.properties file")
    start.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set one Kafka broker key, e.g. --override log.dirs=/data/oncelog (repeatable)",
    )
    start.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    from oncelog.broker.broker import Broker
    from oncelog.broker.embedded import _new_event_loop
    from oncelog.storage.errors import LogError

    logging.basicConfig(
        level=args.log_level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = BrokerConfig.load(args.config, parse_overrides(args.override))
    except ConfigError as error:
        raise CommandError(str(error)) from None
    for key in config.ignored:
        logging.getLogger("oncelog.config").warning("%s is a Kafka setting oncelog does not use; ignored", key)

    loop = _new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        broker = Broker(config)  # its mode's parts: a bad inter-broker TLS or SASL setting stops here
        loop.run_until_complete(broker.start())
    except (ConfigError, OSError, LogError) as error:
        # e.g. "/data/oncelog: log directory is in use by another process"
        raise CommandError(f"cannot start broker: {error}") from None
    loop.run_until_complete(_serve_until_signalled(broker))
    loop.close()
    return 0


async def _serve_until_signalled(broker) -> None:
    """Print the address line, serve until SIGTERM or SIGINT, stop cleanly. All in one
    run of the loop: uvloop drops a signal that comes while its loop is not running, so
    a SIGTERM sent the moment the line appeared, before a second run began, was lost and
    the broker never stopped."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # The address line is the broker's handshake with scripts and test harnesses: a
    # SIGTERM sent as soon as it appears must already stop the broker cleanly.
    bound = f"{broker.inter_broker_host}:{broker.bound_port}"
    advertised = f"{broker.host}:{broker.port}"
    print(f"oncelog broker {broker.node_id} listening on {bound}"
          + ("" if advertised == bound else f" (advertised to clients as {advertised})"), flush=True)
    await stop.wait()
    watch_shutdown(loop)
    await broker.stop()

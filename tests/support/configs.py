"""IncrementalAlterConfigs at the wire, where a client library would check the request
itself."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.static.primitive import i8

from oncelog.protocol.client import WireClient


def wire_alter(broker, resources, resource_type: int = 2, *, validate_only: bool = False,
               client: WireClient | None = None) -> list[tuple[str, ErrorCode, str | None]]:
    """IncrementalAlterConfigs through a new connection, or through `client`."""
    request = incremental_v1.IncrementalAlterConfigsRequest(resources=tuple(
        incremental_v1.AlterConfigsResource(resource_type=i8(resource_type), resource_name=name, configs=tuple(
            incremental_v1.AlterableConfig(name=key, config_operation=i8(operation), value=value)
            for key, operation, value in configs))
        for name, configs in resources), validate_only=validate_only)
    if client is not None:
        response = client.request(request)
    else:
        with WireClient.connect(broker.bootstrap_servers) as new_client:
            response = new_client.request(request)
    return [(r.resource_name, r.error_code, r.error_message) for r in response.responses]

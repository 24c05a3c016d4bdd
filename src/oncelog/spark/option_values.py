"""Option values both connectors parse alike (the source's and the Kafka sink's options):
a positive integer, with the error class of the connector that asks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import overload

from oncelog.spark.errors import SourceOptionError


@overload
def positive_int(options: Mapping[str, str], name: str, default: int,
                 error: type[ValueError] = ...) -> int: ...
@overload
def positive_int(options: Mapping[str, str], name: str, default: None,
                 error: type[ValueError] = ...) -> int | None: ...
def positive_int(options: Mapping[str, str], name: str, default: int | None,
                 error: type[ValueError] = SourceOptionError) -> int | None:
    """Option `name` (looked up lower-cased) as a positive integer; `error` names it when
    it is not one (the sink passes its own error class)."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise error(f"option {name}={raw!r} is not an integer") from None
    if value <= 0:
        raise error(f"option {name}={raw!r} must be positive")
    return value

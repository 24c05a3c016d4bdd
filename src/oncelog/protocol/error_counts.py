"""The error codes in a response, counted: Kafka's `AbstractResponse.errorCounts()`, which
its RequestMetrics ErrorsPerSec counts by API and error (NONE included).

Every field typed `ErrorCode`, at any depth of the response entity, counts once: a
Produce response one per partition, a Fetch response its top-level code and one per
partition, a FindCoordinator one per key. Which fields to read is worked out once per
entity class from its type hints (kio's dataclasses) and kept: counting then costs a
getattr per error field and per nested entity, about a microsecond for a Produce
response of one partition.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from kio.schema.errors import ErrorCode

_ERROR, _ONE, _MANY = 0, 1, 2
_Plan = tuple[tuple[str, int], ...]


def count_errors(entity: Any, counts: dict[int, int]) -> None:
    """Adds the error codes of `entity` (a kio response, or a part of one) to `counts`
    (error code -> occurrences)."""
    for name, kind in _plan(type(entity)):
        value = getattr(entity, name)
        if kind == _ERROR:
            counts[value] = counts.get(value, 0) + 1
        elif kind == _MANY:
            for item in value:
                count_errors(item, counts)
        elif value is not None:
            count_errors(value, counts)


_plans: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _plans.get(cls)
    if plan is None:
        plan = _plans[cls] = _build_plan(cls)
    return plan


def _build_plan(cls: type) -> _Plan:
    """(field, kind) for each field of `cls` that is an error code or holds entities with
    error codes, in declaration order."""
    if not dataclasses.is_dataclass(cls):
        return ()
    hints = typing.get_type_hints(cls)
    plan: list[tuple[str, int]] = []
    for field in dataclasses.fields(cls):
        kind, nested = _kind(hints.get(field.name))
        if kind == _ERROR or (nested is not None and _plan(nested)):
            plan.append((field.name, kind))
    return tuple(plan)


def _kind(hint: object) -> tuple[int, type | None]:
    if hint is ErrorCode:
        return _ERROR, None
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is tuple and arguments and dataclasses.is_dataclass(arguments[0]):
        return _MANY, typing.cast(type, arguments[0])
    if origin in (typing.Union, types.UnionType):  # an optional nested entity
        entities = [argument for argument in arguments if dataclasses.is_dataclass(argument)]
        if len(entities) == 1:
            return _ONE, typing.cast(type, entities[0])
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _ONE, hint
    return -1, None


def error_name(code: int) -> str:
    """Kafka's name of an error code (`NOT_LEADER_OR_FOLLOWER`), or the number when unknown."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)

"""The handler registry. Each module in `kafkafast.broker.handlers` registers the API it
serves with `@handles(RequestClass, min_version, max_version)`; ApiVersions answers from
this registry, so what is advertised is exactly what has a handler."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

Handler = Callable[[Any, Any, Any, int], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    func: Handler


HANDLERS: dict[int, HandlerSpec] = {}


def handles(request_cls: type, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    if not request_cls.MIN_VERSION <= min_version <= max_version <= request_cls.MAX_VERSION:
        raise ValueError(f"{request_cls.__name__}: versions {min_version}-{max_version} outside the schema")

    def register(func: Handler) -> Handler:
        key = request_cls.API_KEY
        if key in HANDLERS:
            raise ValueError(f"two handlers for API key {key}")
        HANDLERS[key] = HandlerSpec(key, request_cls.__name__[: -len("Request")], min_version, max_version, func)
        return func

    return register


def load_handlers() -> dict[int, HandlerSpec]:
    import kafkafast.broker.handlers  # noqa: F401  (imports every handler module)

    return HANDLERS

"""What the schema tells its executors about a field, beside its type: how a plan reads it
(resolvers/execution/completion.py) and what it costs (resolvers/execution/cost.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

Plan = Callable[[Any], Any]
DEFINITION = "strawberry-definition"  # where strawberry keeps a field's definition
COST = "stategate-cost"  # a root field's metadata: Rows, from its arguments
# untyped argument values (given ones only) -> rows, each weighted by its kind's time
Rows = Callable[[Mapping[str, Any]], int]
SCANS = "stategate-scans"  # a root field's metadata: Scans
# the store a root field reads whole with these arguments (untyped, given ones only), or None
Scans = Callable[[Mapping[str, Any]], str | None]
KEY = "stategate-key"  # a root field's metadata: the Store whose record of one key it reads
AS_OF = "stategate-as-of"  # the versioned Store whose version of one key at a time it reads
_READS = "__stategate_reads__"


def reads(read: Plan, returns: Any) -> Callable[..., Any]:
    """A field resolver that reads its parent value with `read`: graphql-core calls it as a
    resolver, compiled plans call `read` itself."""

    def resolve(root: Any) -> Any:
        return read(root)

    resolve.__annotations__ = {"root": Any, "return": returns}
    setattr(resolve, _READS, read)
    return resolve


def reader(definition: Any) -> Plan | None:
    """How a plan reads a field: an attribute, a `reads` function, or None (graphql-core's
    path: a resolver of any other kind)."""
    resolver = definition.base_resolver
    if resolver is None:
        return attrgetter(definition.python_name)
    read: Plan | None = getattr(resolver.wrapped_func, _READS, None)
    return read

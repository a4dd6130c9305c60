"""The schema: fixed metadata queries plus the typed fields of every declared store."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.extensions import (
    MaxAliasesLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)
from strawberry.tools import create_type

from gateway.config import Project
from gateway.positions import encode_token, merge
from resolvers import cluster
from resolvers.completion import PlainRecordExecutionContext
from resolvers.stores import store_fields


class ResponseExtensions(SchemaExtension):
    """Adds the response's consistency token and its routing trace to `extensions`."""

    def get_results(self) -> dict[str, Any]:
        context = self.execution_context.context
        if context is None or not hasattr(context, "batch"):
            return {}
        traces = context.batch.traces
        return {
            "consistencyToken": encode_token(merge(context.tokens)),
            "routing": {
                "rounds": [r for t in traces for r in t.rounds],
                "internalRequests": sum(t.calls() for t in traces),
            },
        }


def build_schema(project: Project) -> strawberry.Schema:
    fields = [
        strawberry.field(cluster.stores, name="stores", description="The declared stores."),
        strawberry.field(cluster.cluster, name="cluster", description="The partition map."),
    ]
    for store in project.stores.values():
        fields.extend(store_fields(project, store))
    query = create_type("Query", fields)
    limit = project.settings.max_keys_per_request
    extensions: list[Any] = [
        ParserCache(maxsize=256),
        ValidationCache(maxsize=256),
        QueryDepthLimiter(max_depth=8),
        MaxAliasesLimiter(max_alias_count=limit),
        ResponseExtensions,
    ]
    return strawberry.Schema(
        query=query,
        extensions=extensions,
        execution_context_class=PlainRecordExecutionContext,
    )


def sdl(project: Project) -> str:
    return build_schema(project).as_str() + "\n"

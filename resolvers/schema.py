"""The schema: fixed metadata queries plus the typed fields of every declared store."""

from __future__ import annotations

import copy
from typing import Any

import strawberry
from graphql import ASTValidationRule, NoSchemaIntrospectionCustomRule
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import create_type

from contracts import names
from contracts.positions import encode_token
from contracts.project import Project
from contracts.settings import Settings
from resolvers import cluster
from resolvers.completion import PlainRecordExecutionContext
from resolvers.context import Context
from resolvers.scalars import SCALARS
from resolvers.stores import store_fields


def response_extensions(context: Context) -> dict[str, Any]:
    traces = context.batch.traces
    return {
        "consistencyToken": encode_token(context.queries.response_token()),
        "routing": {
            "rounds": [r for t in traces for r in t.rounds],
            "internalRequests": sum(t.calls() for t in traces),
            "millis": round(sum(t.millis for t in traces), 3),
        },
    }


def introspection_rules(settings: Settings) -> list[type[ASTValidationRule]]:
    """graphql-core's rule that refuses `__schema` and `__type`, when introspection is off."""
    return [] if settings.introspection else [NoSchemaIntrospectionCustomRule]


SUBSCRIPTION_DESCRIPTION = (
    "Every query field, pushed over graphql-transport-ws on /graphql: the first result at "
    "once, then a new one whenever a partition it reads switches version and the result "
    "changed (README: Subscriptions)."
)


def build_schema(project: Project) -> strawberry.Schema:
    fields = [
        strawberry.field(cluster.stores, name=names.STORES, description="The declared stores."),
        strawberry.field(cluster.cluster, name=names.CLUSTER, description="The partition map."),
    ]
    for store in project.stores.values():
        fields.extend(store_fields(store, project.settings))
    query = create_type("Query", fields)
    # The same fields: a subscription runs as the query it mirrors (resolvers/live.py).
    subscription = create_type(
        "Subscription", [copy.copy(f) for f in fields], description=SUBSCRIPTION_DESCRIPTION
    )
    return strawberry.Schema(
        query=query,
        subscription=subscription,
        execution_context_class=PlainRecordExecutionContext,
        config=StrawberryConfig(scalar_map=SCALARS),
    )


def sdl(project: Project) -> str:
    return build_schema(project).as_str() + "\n"

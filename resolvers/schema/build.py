"""The schema: fixed metadata queries plus the typed fields of every declared store."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection
from typing import Final

import strawberry
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import create_type

from contracts import names
from contracts.project import Project
from resolvers.schema import cluster
from resolvers.schema.entities import Subgraph
from resolvers.schema.scalars import SCALARS
from resolvers.schema.stores import record_types, store_fields

SUBSCRIPTION_DESCRIPTION = (
    "Every query field, pushed over graphql-transport-ws on /graphql: the first result at "
    "once, then a new one whenever a partition it reads switches version and the result "
    "changed (README: Subscriptions)."
)


FEDERATION: Final = "2.5"  # the version the subgraph links, which Apollo's gateways compose


def build_schema(project: Project, served: Collection[str] | None = None) -> strawberry.Schema:
    """The schema of the declared stores, or of those `served` (README: Changing stores)."""
    if served is not None:
        project = dataclasses.replace(
            project, stores={n: s for n, s in project.stores.items() if n in served}
        )
    fields = [
        strawberry.field(cluster.stores, name=names.STORES, description="The declared stores."),
        strawberry.field(cluster.cluster, name=names.CLUSTER, description="The partition map."),
    ]
    federated = project.settings.federation
    records = record_types(project.stores.values(), federated)
    for store in project.stores.values():
        fields.extend(store_fields(store, project.settings, records[store.declared_name]))
    query = create_type("Query", fields)
    # The same fields: a subscription runs as the query it mirrors (resolvers/transport/live.py).
    subscription = create_type(
        "Subscription", [copy.copy(f) for f in fields], description=SUBSCRIPTION_DESCRIPTION
    )
    config = StrawberryConfig(scalar_map=SCALARS)
    if federated:  # _service and _entities on Query (resolvers/schema/entities.py)
        return Subgraph(
            project.stores.values(),
            records,
            project.settings.max_keys_per_field,
            query=query,
            subscription=subscription,
            config=config,
            federation_version=FEDERATION,
        )
    return strawberry.Schema(query=query, subscription=subscription, config=config)


def sdl(project: Project) -> str:
    return build_schema(project).as_str() + "\n"

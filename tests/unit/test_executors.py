"""The executor is chosen once per document, and a request's root fields run once, whatever
the compiled plan cannot word: a value the schema refuses, found after the fields ran, is
completed by graphql-core from the results the plan already has, and the response is the
one graphql-core's own path gives."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest
import strawberry
from graphql import parse

from contracts.access import ANONYMOUS
from contracts.project import Project, load
from resolvers.execution.executors import Compiled, General
from resolvers.execution.key_lookup import key_lookup
from resolvers.execution.plans import compile_plan
from resolvers.schema.build import build_schema
from tests.projects import write_project
from tests.unit.test_completion import BASELINE, Data, Result, broken_cases, run


class Counted:
    """The fake queries of a context, counting every call: one per root field and request."""

    def __init__(self, queries: Any) -> None:
        self.queries, self.calls = queries, 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.queries, name)

        async def counted(*args: Any) -> Any:
            self.calls += 1
            return await method(*args)

        return counted

    def response_token(self) -> Any:
        return {}


def _counted(context: SimpleNamespace) -> SimpleNamespace:
    context.queries = Counted(context.queries)
    context.batch = SimpleNamespace(traces=[])
    return context


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(tmp_path_factory.mktemp("executors"), [1, 2, 3]))


@pytest.fixture(scope="module")
def schema(project: Project) -> strawberry.Schema:
    return build_schema(project)


def _result(done: Any) -> Result:
    errors = [(e.message, e.path) for e in done.errors or []]
    return done.data, errors


def test_a_value_refused_after_the_fields_ran_is_worded_without_running_them_again(
    project: Project, schema: strawberry.Schema
) -> None:
    cases = broken_cases(project)
    compiled_cases = 0
    for name, (text, context) in cases.items():
        document = parse(text)
        plan = compile_plan(schema, document, None)
        if plan is None:
            continue
        compiled_cases += 1
        executor = Compiled(plan, schema, General(schema._schema, document, None))
        counted = _counted(context)
        done = asyncio.run(executor.run(counted, None))  # type: ignore[arg-type]
        roots = len(document.definitions[0].selection_set.selections)  # type: ignore[attr-defined]
        store_roots = counted.queries.calls
        assert store_roots <= roots, f"{name}: {store_roots} calls for {roots} root fields"
        baseline = asyncio.run(run(schema._schema, document, _counted(context), BASELINE))
        assert _result(done) == baseline, name
        assert done.errors, f"{name}: the case must make an error"
    assert compiled_cases >= 3


def test_fields_run_once_when_the_plan_answers_alone(
    project: Project, schema: strawberry.Schema
) -> None:
    text = (
        '{ a: latestBooking(key: "k") { key } '
        'b: latestBookingBatch(keys: ["a"]) { entries { key } } }'
    )
    document = parse(text)
    plan = compile_plan(schema, document, None)
    assert plan is not None
    context = _counted(Data(random.Random(7), project, nulls=0.0).context())
    executor = Compiled(plan, schema, General(schema._schema, document, None))
    done = asyncio.run(executor.run(context, None))  # type: ignore[arg-type]
    assert done.errors is None and context.queries.calls == 2


def test_a_one_key_read_whose_value_the_schema_refuses_is_worded_by_graphql_core(
    project: Project, schema: strawberry.Schema
) -> None:
    text, context = broken_cases(project)["null key of a nullable record"]
    document = parse(text)
    plan = compile_plan(schema, document, None)
    assert plan is not None
    key = key_lookup(plan, frozenset({"latestBooking", "key", "partition", "record", "trip"}))
    assert key is not None
    context = _counted(context)
    context.lone, context.principal = True, ANONYMOUS
    executor = Compiled(plan, schema, General(schema._schema, document, None), key)
    done = asyncio.run(executor.run(context, None))  # type: ignore[arg-type]
    assert context.queries.calls == 1  # read once, by the key lookup
    baseline = asyncio.run(run(schema._schema, document, _counted(context), BASELINE))
    assert _result(done) == baseline and done.errors

"""The [settings] table: every default parses back, every wrong entry is refused with a message
naming `settings.<name>`, and the README documents exactly these settings."""

from __future__ import annotations

import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from contracts.project import ConfigError, load
from contracts.settings import MAX_SUBQUERY_KEYS, Settings, SettingsError, shown, table
from tests.projects import write_project

README = Path(__file__).resolve().parents[2] / "README.md"
FIELDS = {item.name: item for item in fields(Settings)}


def as_toml(value: Any) -> Any:
    """A default as a project file gives it (TOML has lists, not tuples)."""
    return list(value) if isinstance(value, tuple) else value


DEFAULTS: dict[str, Any] = {name: as_toml(getattr(Settings(), name)) for name in FIELDS}
NUMBERS = [name for name, item in FIELDS.items() if type(item.default) in (int, float)]
INTS = [name for name, item in FIELDS.items() if type(item.default) is int]
FLOATS = [name for name, item in FIELDS.items() if type(item.default) is float]
STRINGS = [name for name, item in FIELDS.items() if type(item.default) is str]
LISTS = [name for name, item in FIELDS.items() if type(item.default) is tuple]
BOOLEANS = [name for name, item in FIELDS.items() if type(item.default) is bool]
BOUNDED = [name for name, item in FIELDS.items() if item.metadata["minimum"] is not None]


def refused(raw: dict[str, Any], name: str) -> str:
    with pytest.raises(SettingsError) as caught:
        Settings.parse(raw)
    message = str(caught.value)
    assert f"settings.{name}" in message
    return message


def test_the_setting_kinds_cover_every_field() -> None:
    assert sorted(INTS + FLOATS + STRINGS + LISTS + BOOLEANS) == sorted(FIELDS)
    assert INTS and FLOATS and STRINGS and LISTS and BOOLEANS and BOUNDED


def test_an_empty_table_gives_the_defaults() -> None:
    assert Settings.parse({}) == Settings()


def test_every_default_given_explicitly_parses_to_the_defaults() -> None:
    explicit = {name: as_toml(default) for name, default, _ in table()}
    assert Settings.parse(explicit) == Settings()


@pytest.mark.parametrize("name", list(FIELDS))
def test_each_default_given_alone_parses_to_the_defaults(name: str) -> None:
    assert Settings.parse({name: DEFAULTS[name]}) == Settings()


def test_the_table_lists_every_field_in_order_with_its_default_and_meaning() -> None:
    rows = table()
    assert [name for name, _, _ in rows] == list(FIELDS)
    assert [default for _, default, _ in rows] == [getattr(Settings(), n) for n in FIELDS]
    assert all(isinstance(meaning, str) and meaning for _, _, meaning in rows)


@pytest.mark.parametrize("name", LISTS)
def test_a_list_setting_takes_a_list_of_strings_only(name: str) -> None:
    assert getattr(Settings.parse({name: ["a", "b"]}), name) == ("a", "b")
    for wrong in ["a", [1], ["a", None], {"a": 1}, 3]:
        assert "list of strings" in refused({name: wrong}, name)


@pytest.mark.parametrize("name", ["nope", "defaultPageSize", "DEFAULT_PAGE_SIZE", ""])
def test_an_unknown_setting_is_refused_by_name(name: str) -> None:
    refused({name: 1}, name)


def test_an_unknown_setting_is_refused_with_the_closest_known_one() -> None:
    assert "(did you mean 'max_page_size'? see" in refused({"max_page_sise": 5}, "max_page_sise")
    assert "did you mean" not in refused({"zzz": 5}, "zzz")


def test_a_table_that_is_not_a_table_is_refused() -> None:
    not_tables: list[object] = [[], "x", 1, None]
    for raw in not_tables:
        with pytest.raises(SettingsError, match=r"\[settings\]"):
            Settings.parse(raw)


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("value", [True, False, "10", "1GB", None, [1], {"a": 1}])
def test_a_number_setting_refuses_values_that_are_not_numbers(name: str, value: object) -> None:
    refused({name: value}, name)


@pytest.mark.parametrize("name", INTS)
def test_an_integer_setting_refuses_a_fraction(name: str) -> None:
    refused({name: DEFAULTS[name] + 0.5}, name)


@pytest.mark.parametrize("name", FLOATS)
def test_a_number_setting_takes_an_integer_as_a_float(name: str) -> None:
    value = math.ceil(DEFAULTS[name])
    parsed = getattr(Settings.parse({name: value}), name)
    assert parsed == value and type(parsed) is float


@pytest.mark.parametrize("name", BOOLEANS)
def test_a_boolean_setting_takes_true_or_false_only(name: str) -> None:
    assert getattr(Settings.parse({name: False}), name) is False
    for wrong in [0, 1, "false", None, [True]]:
        refused({name: wrong}, name)


@pytest.mark.parametrize("name", STRINGS)
@pytest.mark.parametrize("value", [1, 1.5, True, None, ["info"]])
def test_a_string_setting_refuses_values_that_are_not_strings(name: str, value: object) -> None:
    refused({name: value}, name)


@pytest.mark.parametrize("name", BOUNDED)
def test_a_value_below_the_minimum_is_refused(name: str) -> None:
    minimum = FIELDS[name].metadata["minimum"]
    below = minimum - 1 if name in INTS or minimum == 0 else minimum / 2
    message = refused({name: below}, name)
    assert str(minimum) in message


@pytest.mark.parametrize("name", BOUNDED)
def test_the_minimum_itself_is_accepted(name: str) -> None:
    minimum = FIELDS[name].metadata["minimum"]
    raw: dict[str, Any] = {name: minimum}
    if name == "max_page_size":
        raw["default_page_size"] = minimum  # the default page must fit in the largest
    assert getattr(Settings.parse(raw), name) == minimum


def test_a_nan_is_refused_for_every_bounded_number() -> None:
    # TOML has `nan`; NaN compares false with everything, so `value < minimum` lets it in.
    bounded_floats = [name for name in FLOATS if name in BOUNDED]
    assert bounded_floats
    accepted = []
    for name in bounded_floats:
        try:
            Settings.parse({name: math.nan})
        except SettingsError as exc:
            assert f"settings.{name}" in str(exc)
        else:
            accepted.append(name)
    assert accepted == []


def test_a_value_above_the_maximum_is_refused_and_the_maximum_accepted() -> None:
    capped = {item.name: item.metadata["maximum"] for item in fields(Settings)
              if item.metadata["maximum"] is not None}  # fmt: skip
    assert capped == {"max_keys_per_field": MAX_SUBQUERY_KEYS, "pipeline_niceness": 19}
    for name, maximum in capped.items():
        assert f"at most {maximum}" in refused({name: maximum + 1}, name)
        assert getattr(Settings.parse({name: maximum}), name) == maximum


def test_a_retired_setting_names_the_settings_that_replace_it() -> None:
    message = refused({"max_keys_per_request": 100}, "max_keys_per_request")
    assert "max_keys_per_field" in message and "max_aliases" in message


def test_the_default_page_must_not_exceed_the_largest_page() -> None:
    refused({"default_page_size": 11, "max_page_size": 10}, "default_page_size")
    assert Settings.parse({"default_page_size": 10, "max_page_size": 10}).max_page_size == 10


def test_an_unknown_log_level_is_refused() -> None:
    refused({"log_level": "verbose"}, "log_level")
    assert Settings.parse({"log_level": "debug"}).log_level == "debug"


def test_an_unknown_log_format_is_refused() -> None:
    refused({"log_format": "logfmt"}, "log_format")
    assert Settings.parse({"log_format": "json"}).log_format == "json"


def test_an_unknown_bad_record_policy_is_refused() -> None:
    refused({"bad_records": "ignore"}, "bad_records")
    assert Settings.parse({"bad_records": "fail"}).bad_records == "fail"


# --- in the project file ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "name"),
    [
        ("nope = 1", "nope"),
        ("max_page_size = true", "max_page_size"),
        ('default_page_size = "5"', "default_page_size"),
        ("query_threads = 0", "query_threads"),
        ("internal_timeout_s = 0.001", "internal_timeout_s"),
        ("log_level = 3", "log_level"),
    ],
)
def test_a_bad_settings_entry_in_the_project_file_names_the_file_and_the_setting(
    tmp_path: Path, entry: str, name: str
) -> None:
    path = write_project(tmp_path, [1, 2], settings=entry)
    with pytest.raises(ConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path.resolve()}: ")
    assert f"settings.{name}" in message


def test_good_settings_in_the_project_file_are_applied(tmp_path: Path) -> None:
    path = write_project(tmp_path, [1, 2], settings="max_page_size = 500\nkeep_alive_s = 3")
    settings = load(path).settings
    assert (settings.max_page_size, settings.keep_alive_s) == (500, 3.0)
    assert settings.peer_pool_expiry_s == pytest.approx(1.0)


# --- the README -------------------------------------------------------------------------


def settings_rows(text: str) -> list[tuple[str, str, str]]:
    """(name, default, meaning) of every row of the settings table of a README, in order."""
    heading = "### Settings"
    section = text[text.index(heading) + len(heading) :]
    end = re.search(r"^#", section, flags=re.MULTILINE)
    section = section if end is None else section[: end.start()]
    return re.findall(
        r"^\| `(\w+)` \| ([^|]*?) \| ([^\n]*?) \|[ \t]*$", section, flags=re.MULTILINE
    )


def test_the_settings_row_parser_reads_only_the_settings_section() -> None:
    text = (
        "| `outside` | 1 | before |\n### Settings\n\n| setting | default | meaning |\n"
        "| --- | --- | --- |\n| `a` | 100 | x, y |\n| `b` | 1GB | z |\n\n## Next\n| `c` | 2 | w |\n"
    )
    assert settings_rows(text) == [("a", "100", "x, y"), ("b", "1GB", "z")]


def test_the_readme_lists_every_setting_in_order_with_its_default_and_meaning() -> None:
    """The README's table is what `stategate settings` prints."""
    documented = settings_rows(README.read_text())
    expected = [(name, shown(default), meaning) for name, default, meaning in table()]
    assert [n for n, *_ in documented] == [n for n, *_ in expected]
    assert documented == expected


def test_duckdbs_memory_limit_is_a_size_duckdb_reads() -> None:
    """Checked when the file loads, not when a node opens DuckDB (then a traceback)."""
    for good in ["1GB", "1.5 GB", "512mb", "2GiB", "80%", "100%", "1 gigabyte"]:
        assert Settings.parse({"duckdb_memory_limit": good}).duckdb_memory_limit == good
    for bad in ["banana", "1000", "0GB", "-1GB", "", "1e3MB", "100.5%", "0%", "100B", "\uff11GB"]:
        assert "a size DuckDB reads" in refused({"duckdb_memory_limit": bad}, "duckdb_memory_limit")

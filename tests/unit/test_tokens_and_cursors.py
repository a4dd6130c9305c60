"""Consistency tokens and page cursors: opaque strings that round-trip exactly and refuse
anything this gateway did not issue with their own error code."""

from __future__ import annotations

import base64
import random
import string
import tomllib
from pathlib import Path

import pytest

from contracts import opaque, positions
from contracts.errors import GatewayError
from contracts.partitioner import Key, KeyType
from contracts.positions import Position
from contracts.project import Store, parse
from gateway.model import cursors

TOPIC_CHARS = string.ascii_letters + string.digits + "._-äö日本🚆\"'\\ "


def random_topic(rng: random.Random) -> str:
    return "".join(rng.choice(TOPIC_CHARS) for _ in range(rng.randrange(0, 12)))


def random_position(rng: random.Random, topics: list[str] | None = None) -> Position:
    topics = topics or [random_topic(rng) for _ in range(rng.randrange(0, 4))]
    return {
        (rng.choice(topics), rng.randrange(0, 64)): rng.choice([0, 1, rng.randrange(2**62)])
        for _ in range(rng.randrange(0, 12) if topics else 0)
    }


def random_key(rng: random.Random, key_type: KeyType) -> Key:
    if key_type == "string":
        alphabet = "aZ09 é日🚆\U0010ffff\"'"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))
    if key_type == "int":
        return rng.randrange(-(2**31), 2**31)
    return rng.randrange(-(2**63), 2**63)


def assert_token_refused(token: str) -> None:
    with pytest.raises(GatewayError) as caught:
        positions.decode_token(token)
    assert caught.value.code == "BAD_CONSISTENCY_TOKEN"
    assert caught.value.extensions["code"] == "BAD_CONSISTENCY_TOKEN"


def assert_cursor_refused(store: str, key_type: KeyType, cursor: str, width: int) -> None:
    with pytest.raises(GatewayError) as caught:
        cursors.decode(store, key_type, cursor, width)
    assert caught.value.code == "BAD_CURSOR"


# --- consistency tokens -----------------------------------------------------------------


def test_a_token_decodes_to_the_position_it_was_encoded_from() -> None:
    rng = random.Random(1)
    for _ in range(500):
        position = random_position(rng)
        token = positions.encode_token(position)
        assert positions.decode_token(token) == position


def test_a_token_is_url_safe_text_without_padding() -> None:
    rng = random.Random(2)
    allowed = set(string.ascii_letters + string.digits + "-_")
    for _ in range(200):
        token = positions.encode_token(random_position(rng))
        assert set(token) <= allowed


def test_equal_positions_give_equal_tokens_whatever_their_insertion_order() -> None:
    rng = random.Random(3)
    for _ in range(200):
        position = random_position(rng)
        items = list(position.items())
        rng.shuffle(items)
        assert positions.encode_token(dict(items)) == positions.encode_token(position)


def test_random_strings_are_refused_as_bad_consistency_tokens() -> None:
    rng = random.Random(4)
    alphabet = string.printable + "é日🚆"
    for _ in range(500):
        assert_token_refused("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60))))


@pytest.mark.parametrize(
    "body",
    [
        None,
        1,
        "v1",
        [1, {}],
        {},
        {"p": {}},
        {"v": 1},
        {"v": 0, "p": {}},
        {"v": 2, "p": {}},
        {"v": "1", "p": {}},
        {"v": None, "p": {}},
        {"v": 1, "p": []},
        {"v": 1, "p": "t"},
        {"v": 1, "p": {"t": [1, 2]}},
        {"v": 1, "p": {"t": 3}},
        {"v": 1, "p": {"t": {"x": 1}}},
        {"v": 1, "p": {"t": {"0": -1}}},
        {"v": 1, "p": {"t": {"0": True}}},
        {"v": 1, "p": {"t": {"0": False}}},
        {"v": 1, "p": {"t": {"0": 1.5}}},
        {"v": 1, "p": {"t": {"0": "7"}}},
        {"v": 1, "p": {"t": {"0": None}}},
    ],
)
def test_well_encoded_bodies_that_are_not_positions_are_refused(body: object) -> None:
    assert_token_refused(opaque.encode(body))


def test_valid_base64_of_text_that_is_not_json_is_refused() -> None:
    for raw in [b"", b"{", b"\xff\xfe", b"not json", b'{"v": 1, "p": {}']:
        assert_token_refused(base64.urlsafe_b64encode(raw).decode().rstrip("="))


def test_a_negative_offset_anywhere_in_a_token_refuses_the_whole_token() -> None:
    rng = random.Random(5)
    for _ in range(100):
        position = random_position(rng, ["a", "b"]) or {("a", 0): 1}
        tree: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in position.items():
            tree.setdefault(topic, {})[str(partition)] = offset
        topic = rng.choice(list(tree))
        tree[topic][rng.choice(list(tree[topic]))] = -rng.randrange(1, 2**40)
        assert_token_refused(opaque.encode({"v": positions.TOKEN_VERSION, "p": tree}))


def test_merge_keeps_the_largest_offset_of_every_topic_partition() -> None:
    rng = random.Random(6)
    for _ in range(300):
        given = [random_position(rng, ["a", "b", "c"]) for _ in range(rng.randrange(0, 6))]
        expected: dict[tuple[str, int], int] = {}
        for position in given:
            for tp, offset in position.items():
                expected[tp] = max(expected.get(tp, offset), offset)
        assert positions.merge(given) == expected


def test_merge_does_not_change_its_inputs() -> None:
    first, second = {("a", 0): 5}, {("a", 0): 9, ("b", 1): 1}
    merged = positions.merge([first, second])
    merged[("a", 0)] = 0
    assert first == {("a", 0): 5}
    assert second == {("a", 0): 9, ("b", 1): 1}


# --- page cursors -----------------------------------------------------------------------

KEY_TYPES: tuple[KeyType, ...] = ("string", "int", "long")


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_a_cursor_decodes_to_the_last_key_it_was_encoded_from(key_type: KeyType) -> None:
    rng = random.Random(7)
    for _ in range(300):
        key = random_key(rng, key_type)
        assert cursors.decode("s", key_type, cursors.encode("s", [key]), 1) == [key]


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_a_window_cursor_decodes_to_its_key_and_window_start(key_type: KeyType) -> None:
    rng = random.Random(8)
    for _ in range(300):
        last = [random_key(rng, key_type), rng.randrange(-(2**62), 2**62)]
        assert cursors.decode("w", key_type, cursors.encode("w", last), 2) == last


def test_a_cursor_of_another_store_is_refused() -> None:
    rng = random.Random(9)
    for _ in range(100):
        store = "".join(rng.choice("abcAB") for _ in range(rng.randrange(1, 5)))
        other = store + rng.choice("xyz")
        cursor = cursors.encode(store, ["k"])
        assert_cursor_refused(other, "string", cursor, 1)
        assert_cursor_refused(store.swapcase(), "string", cursor, 1)  # names are case-sensitive


@pytest.mark.parametrize(("encoded", "asked"), [(1, 2), (2, 1), (0, 1), (3, 2)])
def test_a_cursor_of_another_width_is_refused(encoded: int, asked: int) -> None:
    keys: tuple[Key, ...] = (5, 10, 20)
    last = list(keys[:encoded])
    assert_cursor_refused("s", "long", cursors.encode("s", last), asked)


@pytest.mark.parametrize(
    ("key_type", "last", "width"),
    [
        ("int", ["7"], 1),
        ("long", ["7"], 1),
        ("int", [True], 1),
        ("long", [False], 1),
        ("int", [1.0], 1),
        ("int", [None], 1),
        ("string", [7], 1),
        ("string", [None], 1),
        ("string", [["a"]], 1),
        ("string", ["a", "0"], 2),
        ("string", ["a", True], 2),
        ("string", ["a", 1.5], 2),
        ("int", [1, None], 2),
        ("int", ["1", 0], 2),
    ],
)
def test_a_cursor_holding_a_key_of_the_wrong_type_is_refused(
    key_type: KeyType, last: list[object], width: int
) -> None:
    assert_cursor_refused("s", key_type, opaque.encode({"s": "s", "k": last}), width)


@pytest.mark.parametrize(
    "body",
    [None, 1, "s", ["s", [1]], {}, {"s": "s"}, {"k": [1]}, {"s": "s", "k": 1}, {"s": "s", "k": {}}],
)
def test_a_well_encoded_body_that_is_not_a_cursor_is_refused(body: object) -> None:
    assert_cursor_refused("s", "int", opaque.encode(body), 1)


def test_random_strings_are_refused_as_bad_cursors() -> None:
    rng = random.Random(10)
    alphabet = string.printable + "é日🚆"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        assert_cursor_refused("s", rng.choice(KEY_TYPES), text, rng.choice([1, 2]))


def test_a_consistency_token_is_not_accepted_as_a_cursor() -> None:
    token = positions.encode_token({("s", 0): 3})
    assert_cursor_refused("s", "int", token, 1)


def test_a_key_outside_its_key_type_is_refused() -> None:
    assert_cursor_refused("s", "int", cursors.encode("s", [2**31]), 1)
    assert_cursor_refused("s", "int", cursors.encode("s", [-(2**31) - 1]), 1)
    assert cursors.decode("s", "long", cursors.encode("s", [2**31]), 1) == [2**31]


def test_a_window_cursor_is_valid_only_for_a_start_its_scan_can_return() -> None:
    (store,) = (s for s in load_stores() if s.name == "hopping")
    half = 30 * 60_000
    good = cursors.encode("hopping", ["k", -half])
    assert cursors.decode_window(store, good, -half, 10 * half) == ("k", -half)
    for start, low, high in [(1, 0, half), (half - 1, 0, half), (half, 0, half - 1), (0, 1, 9)]:
        with pytest.raises(GatewayError) as caught:
            cursors.decode_window(store, cursors.encode("hopping", ["k", start]), low, high)
        assert caught.value.code == "BAD_CURSOR"


def load_stores() -> list[Store]:
    text = (
        '[log]\ndir = "log"\n[snapshots]\nstore = "s"\n[cluster]\npartitions = 1\n'
        'secret = "x"\n[[cluster.nodes]]\nid = "n"\naddress = "127.0.0.1:1"\ndata_dir = "n"\n'
        '[[topics]]\nname = "t"\nkey = "string"\nvalue = { x = "double" }\n'
        '[[stores]]\nname = "hopping"\nkind = "window"\ntopic = "t"\nsize = "1h"\n'
        'advance = "30m"\naggregates = { n = "count" }\n'
    )
    return list(parse(tomllib.loads(text), Path("stategate.toml")).stores.values())


@pytest.mark.parametrize(
    ("cursor", "width", "says"),
    [
        ("not a cursor!", 1, "it is not a cursor this gateway issued"),
        (opaque.encode({"s": "s", "k": 5}), 1, "it is not a page cursor"),
        (cursors.encode("t", ["k"]), 1, 'it belongs to another store, "t"'),
        (cursors.encode("s", ["k", 0]), 1, "it is a window scan's cursor, not a key scan's"),
        (cursors.encode("s", ["k"]), 2, "it is a key scan's cursor, not a window scan's"),
        (cursors.encode("s", ["k", 0, 1]), 2, "it holds 3 values, where a cursor of this query"),
        (cursors.encode("s", [7]), 1, "its key 7 is not a string key"),
        (opaque.encode({"s": "s", "k": [[1] * 99]}), 1, "its key [1,1,1,"),  # shortened
        (cursors.encode("s", ["k", "0"]), 2, 'its window start "0" is not a whole number of ms'),
    ],
)
def test_a_refused_cursor_says_what_is_wrong(cursor: str, width: int, says: str) -> None:
    with pytest.raises(GatewayError) as caught:
        cursors.decode("s", "string", cursor, width)
    assert says.replace(" ms", " milliseconds") in caught.value.message
    assert len(caught.value.message) < 200


def test_a_window_cursor_names_the_start_and_the_bounds_as_the_api_writes_them() -> None:
    (store,) = (s for s in load_stores() if s.name == "hopping")
    day = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    refusals = {
        day + 123: "no window of hopping starts at 2026-01-01T00:00:00.123+00:00 "
        "(they start every 1800000 ms from the epoch)",
        day + 3_600_000: "its window start 2026-01-01T01:00:00+00:00 is outside this query's "
        "from and to, [2026-01-01T00:00:00+00:00, 2026-01-01T00:30:00+00:00]",
    }
    for start, says in refusals.items():
        with pytest.raises(GatewayError) as caught:
            cursor = cursors.encode("hopping", ["k", start])
            cursors.decode_window(store, cursor, day, day + 1_800_000)
        assert says in caught.value.message

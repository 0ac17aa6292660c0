"""dlxtool.json_shapes: the guards say JSON object and array for exactly what json.loads makes of them."""

from __future__ import annotations

import json

import pytest

from dlxtool.json_shapes import is_array, is_object, items_of

pytestmark = pytest.mark.once  # no broker: the 3.x pass only


def test_objects_and_arrays_are_told_apart() -> None:
    parsed = json.loads('{"a": [1, {"b": null}], "c": "x"}')
    assert is_object(parsed) and not is_array(parsed)
    assert is_array(parsed["a"]) and not is_object(parsed["a"])
    assert is_object(parsed["a"][1])
    for other in ("x", 1, None, 1.5, True):
        assert not is_object(other) and not is_array(other)


def test_items_of_gives_an_arrays_items_and_nothing_else() -> None:
    assert items_of([1, {"a": 2}]) == [1, {"a": 2}]
    for other in (None, {"error": "x"}, "ab", 3):
        assert items_of(other) == []

"""Type guards for JSON as the management API and record files hand it over (`Any` from json.loads).

`isinstance(value, dict)` narrows such a value to a dict of unknown keys and values, which strict type checking
then reports at every `.get`; these narrow it to what JSON holds: an object has string keys, and any value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard


def is_object(value: object) -> TypeGuard[dict[str, Any]]:
    """A JSON object (a dict: JSON's keys are strings)."""
    return isinstance(value, dict)


def is_array(value: object) -> TypeGuard[list[Any]]:
    """A JSON array (a list)."""
    return isinstance(value, list)


def items_of(value: object) -> list[Any]:
    """The items of a JSON array; none for anything else (a listing the API did not give: null, an error object)."""
    return value if is_array(value) else []


def is_list_or_tuple(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    """A list or a tuple of any values (an array as pika decodes a header table's, or JSON's)."""
    return isinstance(value, list | tuple)


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """A mapping with string keys (a JSON object, or a table already read into another mapping)."""
    return isinstance(value, Mapping)

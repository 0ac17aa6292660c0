"""Hypothesis strategies for what arrives from brokers, files and users: AMQP header values of every
type pika produces, arbitrary JSON, TOML-shaped config tables."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# DLXTOOL_FUZZ_EXAMPLES=5000 for a long run; the default keeps the suite quick.
EXAMPLES = int(os.environ.get("DLXTOOL_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

text = st.text(st.characters(codec="utf-8"), max_size=40)  # any code point UTF-8 can carry (no surrogates)
keys = st.text(st.characters(codec="utf-8"), max_size=12)
# What pika hands over: AMQP integers up to 64 bits, strings, bytes (non-UTF-8 long strings), booleans,
# void, timestamps (second precision), decimals (8-bit scale, 32-bit value), tables and arrays.
amqp_scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1), text, st.binary(max_size=40), st.booleans(), st.none(),
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1))
    .map(lambda d: d.replace(microsecond=0, tzinfo=UTC)),
    st.builds(lambda v, e: Decimal(v).scaleb(-e), st.integers(-(2**31), 2**31 - 1), st.integers(0, 20)),
)
amqp_values = st.recursive(
    amqp_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=25,
)
amqp_tables = st.dictionaries(keys, amqp_values, max_size=6)

# Arbitrary JSON (what a hand-edited or corrupt dump file holds).
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=30,
)

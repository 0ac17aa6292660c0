"""[conventions.NAME] in the config file: global and per broker, a broker's own first."""

from __future__ import annotations

import tomllib
from pathlib import Path

from dlxtool.config import parse_config

TOML = """
[conventions.acme]
origin_queue_header = "x-acme-queue"

[conventions.shared]
error_headers = "x-shared-error"

[brokers.prod]
url = "amqp://prod:5672/"

[brokers.prod.conventions.acme]
origin_exchange_header = "x-acme-ex"
origin_routing_key_header = "x-acme-key"
"""


def test_a_brokers_convention_replaces_the_global_one_of_the_same_name() -> None:
    config = parse_config(tomllib.loads(TOML), Path("/etc/dlx.toml"), {})
    prod = config.conventions_for(config.profile("prod"))
    assert [(c.name, c.origin_exchange_header, c.origin_queue_header) for c in prod] == [
        ("acme", "x-acme-ex", None), ("shared", None, None)]
    local = config.conventions_for(config.profile("local"))
    assert [(c.name, c.origin_queue_header) for c in local] == [("acme", "x-acme-queue"), ("shared", None)]
    assert local[1].error_headers == ("x-shared-error",)
    assert "[brokers.prod.conventions.acme]" in prod[0].source

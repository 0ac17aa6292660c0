"""Fuzz the config loader: any TOML text and any table shape give profiles or a DlxtoolError (a clear
message and exit status), never a crash — including when a profile is then used."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dlxtool.broker.connection import connection_parameters
from dlxtool.config import load_config, parse_config, select_profile
from dlxtool.errors import DlxtoolError
from tests.fuzz.strategies import FUZZ, text

BROKER_KEYS = ["url", "urls", "vhost", "user", "password", "password_env", "password_file", "management_url",
               "tls", "proto_paths", "reset_headers", "timeout", "auth", "description"]
TLS_KEYS = ["ca", "cert", "key", "verify", "server_name"]
toml_scalars = st.one_of(text, st.integers(-5, 10**6), st.floats(allow_nan=False), st.booleans(),
                         st.sampled_from(["amqp://u:p@h:5672/v", "amqps://h", "amqp://[::1]:1/%2F", "http://x",
                                          "amqp://h:99999", "amqps://u@h/", "external", "plain", "/dev/null"]))
toml_values = st.one_of(toml_scalars, st.lists(toml_scalars, max_size=3))
tls_tables = st.dictionaries(st.sampled_from(TLS_KEYS), toml_values, max_size=5)
broker_tables = st.dictionaries(st.sampled_from(BROKER_KEYS), st.one_of(toml_values, tls_tables), max_size=8)
configs = st.fixed_dictionaries({}, optional={
    "default": st.one_of(text, st.sampled_from(["a", "local"])),
    "timeout": toml_scalars,
    "brokers": st.one_of(st.dictionaries(st.sampled_from(["a", "b", "local"]), st.one_of(broker_tables, toml_values),
                                         max_size=3), toml_values),
    "proto_paths": toml_values, "dump_unacked_limit": toml_scalars, "error_headers": toml_values,
})


def use(config) -> None:
    """What commands do with a loaded config: choose, read and connect-prepare each profile."""
    for name in config.brokers:
        profile = select_profile(config, broker=name, env={"PW": "pw"})
        profile.masked_urls()
        profile.username, profile.password_source  # noqa: B018 - evaluated for their errors
        if profile.password_source != "file":
            profile.password()
        connection_parameters(profile)


@FUZZ
@given(configs)
def test_any_config_table_loads_or_says_why(data: dict) -> None:
    with contextlib.suppress(DlxtoolError):
        use(parse_config(data, Path("fuzz.toml"), {"PW": "pw"}))


@FUZZ
@given(st.text(max_size=300))
def test_any_file_text_loads_or_says_why(content: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.toml"
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
        with contextlib.suppress(DlxtoolError):
            use(load_config(str(path), {}))

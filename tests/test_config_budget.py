"""max_bytes in the config file: top level for every broker, a broker's own for it; sizes as users write them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlxtool.budget import DEFAULT_MAX_BYTES, MiB
from dlxtool.config import load_config, select_profile
from dlxtool.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_the_top_level_applies_to_every_broker_and_a_brokers_own_wins(tmp_path: Path) -> None:
    path = write(tmp_path, 'max_bytes = "64MiB"\n[brokers.a]\nurl = "amqp://h/"\n'
                           '[brokers.b]\nurl = "amqp://h/"\nmax_bytes = 1073741824\n')
    config = load_config(str(path), {})
    assert config.max_bytes == 64 * MiB
    assert config.profile("a").max_bytes == 64 * MiB
    assert config.profile("b").max_bytes == 1024 * MiB
    assert config.profile("local").max_bytes == 64 * MiB
    assert select_profile(config, url="amqp://other/").max_bytes == 64 * MiB  # --url alone: the file's too


def test_without_it_the_default_is_256_mib(tmp_path: Path) -> None:
    config = load_config(str(write(tmp_path, '[brokers.a]\nurl = "amqp://h/"\n')), {})
    assert config.max_bytes == config.profile("a").max_bytes == DEFAULT_MAX_BYTES == 256 * MiB
    assert load_config(None, {"HOME": str(tmp_path)}).profile("local").max_bytes == DEFAULT_MAX_BYTES


@pytest.mark.parametrize(("text", "needle"), [
    ('max_bytes = "lots"\n', "max_bytes: 'lots' is not a size"),
    ("max_bytes = 0\n", "max_bytes: a byte budget must be at least 1 byte"),
    ("max_bytes = 1.5\n", "max_bytes: expected a size like 256MiB"),
    ("max_bytes = true\n", "max_bytes: expected a size like 256MiB"),
    ('[brokers.a]\nurl = "amqp://h/"\nmax_bytes = "12XB"\n', "[brokers.a]: max_bytes: '12XB' is not a size"),
])
def test_a_bad_size_names_the_key_and_where(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_config(str(path), {})
    assert str(path) in raised.value.message and needle in raised.value.message
    assert "max_bytes = \"512MiB\"" in (raised.value.hint or "")

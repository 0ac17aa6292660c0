"""The proton Container AMQP 1.0 connections run on (dlxtool.broker.amqp10.connection.without_ssl_contexts)."""

from __future__ import annotations

import pytest

pytest.importorskip("proton")


def test_the_container_has_every_setting_proton_gives_its_own_but_the_ssl_contexts() -> None:
    """Container.__init__'s settings are copied (to leave out its two SSL contexts): a proton that adds one fails
    here rather than in a connection."""
    from proton.reactor import Container

    from dlxtool.broker.amqp10.connection import without_ssl_contexts

    theirs, ours = Container(container_id="c"), without_ssl_contexts("c")
    assert set(vars(ours)) == set(vars(theirs))
    differ = {k for k, v in vars(theirs).items() if k not in ("ssl", "_global_handler", "_now")
              and type(v) in (bool, str, int, type(None)) and vars(ours)[k] != v}
    assert differ == set()
    assert ours.ssl is None and theirs.ssl is not None
    assert type(ours.global_handler) is type(theirs.global_handler)

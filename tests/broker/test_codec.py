"""The wire codec setting (dlxtool.broker.wire.codec): what the environment chooses, what each setting
installs on a real connection."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from dlxtool.broker.connection import close_quietly, connect
from dlxtool.broker.wire import codec as wire_codec
from dlxtool.broker.wire import hotpath
from dlxtool.config import BrokerProfile
from dlxtool.errors import UsageError
from tests.support.codecs import CODECS


@pytest.mark.parametrize(("environ", "expected"), [
    ({"DLXTOOL_CODEC": "pika"}, "pika"),
    ({"DLXTOOL_CODEC": " Python "}, "python"),
    ({"DLXTOOL_NO_HOTPATH": "1"}, "python"),                           # the older switch: an alias
    ({"DLXTOOL_NO_HOTPATH": "1", "DLXTOOL_CODEC": "pika"}, "pika"),    # the codec setting wins
    ({"DLXTOOL_CODEC": "c", "DLXTOOL_NO_HOTPATH": "1"}, "c"),
])
def test_the_environment_chooses_the_codec(environ: dict[str, str], expected: str) -> None:
    assert wire_codec.name_from_env(environ) == expected


@pytest.mark.parametrize("environ", [{}, {"DLXTOOL_NO_HOTPATH": "0"}, {"DLXTOOL_CODEC": ""}])
def test_unset_it_is_c_where_the_extension_is_built_else_python(environ: dict[str, str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert wire_codec.name_from_env(environ) == ("c" if hotpath.load() is not None else "python")
    monkeypatch.setattr(hotpath, "load", lambda: None)
    assert wire_codec.name_from_env(environ) == "python"


def test_the_settings_differ_in_what_they_install() -> None:
    made = {name: wire_codec.make(name) for name in ("python", "pika")}
    assert [(c.reads_frames, c.accelerator, c.header_splice) for c in made.values()] == [(True, None, None),
                                                                                         (False, None, None)]
    if hotpath.load() is not None:
        c = wire_codec.make("c")
        assert (c.reads_frames, c.accelerator) == (True, hotpath.load())
        module = hotpath.load()
        assert c.header_splice == (module.scan_headers, module.splice_headers, module.fingerprint)


def test_an_unknown_codec_or_c_without_the_extension_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="DLXTOOL_CODEC='fast' is not a codec") as bad:
        wire_codec.make("fast")
    assert bad.value.hint == "one of: c, python, pika"
    monkeypatch.setattr(hotpath, "load", lambda: None)
    with pytest.raises(UsageError, match="C extension .* is not built here"):
        wire_codec.make("c")


def test_using_wins_over_the_environment_and_ends_with_its_block() -> None:
    before = wire_codec.current()
    try:
        assert wire_codec.configure({"DLXTOOL_CODEC": "python"}).name == "python"
        with wire_codec.using("pika") as chosen:
            assert wire_codec.current() is chosen and chosen.name == "pika"
        assert wire_codec.current().name == "python"
        assert wire_codec.configure({"DLXTOOL_CODEC": "pika"}).name == "pika"  # a later command's own environment
        with pytest.raises(UsageError):
            wire_codec.configure({"DLXTOOL_CODEC": "fast"})
        assert wire_codec.current().name == "pika"  # a refused setting changed nothing
    finally:
        wire_codec.configure({wire_codec.ENV: before.name})


def test_a_command_uses_the_codec_its_environment_names(broker, run) -> None:
    """The CLI's environment (App.env, carried by the profile) decides, not the process's os.environ."""
    before = wire_codec.current()
    try:
        for name in ("pika", "python"):
            result = run("queues", "--url", broker.url, "--format", "json", env={"DLXTOOL_CODEC": name})
            assert result.exit_code == 0, result.stderr
            assert wire_codec.current().name == name
    finally:
        wire_codec.configure({wire_codec.ENV: before.name})


def test_a_bad_codec_setting_is_one_line_and_exit_2_before_connecting(run) -> None:
    result = run("peek", "q", "--url", "amqp://guest:guest@127.0.0.1:1/", env={"DLXTOOL_CODEC": "fast"})
    assert result.exit_code == 2, result.stderr
    assert "DLXTOOL_CODEC='fast' is not a codec" in result.stderr
    assert "Traceback" not in result.stderr and "connect" not in result.stderr


@pytest.mark.parametrize("codec", CODECS, indirect=True)
def test_connect_installs_dlxtools_frame_reader_except_on_pika(broker, codec) -> None:
    url = f"amqp://guest:guest@{broker.host}:{broker.amqp_port}/{quote(broker.vhost, safe='')}"
    conn = connect(BrokerProfile(name="t", urls=(url,), vhost=broker.vhost))
    try:
        impl = conn._impl  # noqa: SLF001
        reader = impl.__dict__.get("_dlxtool_fast_input")
        if codec.name == "pika":  # pika's own reader: its method, not shadowed on the instance
            assert reader is None and "_on_data_available" not in impl.__dict__
        else:
            assert impl.__dict__["_on_data_available"] == reader.on_data
            assert reader.accelerator is codec.accelerator
        conn.channel().queue_declare("", exclusive=True)  # and the connection works either way
    finally:
        close_quietly(conn)

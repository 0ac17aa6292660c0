from importlib.metadata import version

from dlxtool import __version__


def test_version_names_dlxtool_and_its_key_libraries(run) -> None:
    result = run("--version")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"dlxtool {__version__}"
    for dist in ("pika", "protobuf", "grpcio-tools", "click"):
        assert f"{dist} {version(dist)}" in lines

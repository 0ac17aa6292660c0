"""CLI glue of `replay --edit` and `load --reencode` (dlxtool.editing): the schemas loaded once and only when a
body needs them, the editor, the diff and the one question."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dlxtool.cli.app import App
from dlxtool.errors import DlxtoolError

if TYPE_CHECKING:
    from proto_registry import Registry


def registry_loader(app: App, *, required: bool) -> Callable[[], Registry | None]:
    """The schemas every command reads (App.schemas), loaded on the first call; None when none are configured.
    A registry that fails to load raises (`required`: load --reencode) or is said once and left out (replay --edit:
    protobuf bodies are then shown as base64, still editable)."""
    loaded: list[Registry | None] = []

    def load() -> Registry | None:
        if not loaded:
            from dlxtool.decoding import load_registry

            schemas = app.schemas()
            registry = None
            if schemas.paths or schemas.demo:
                try:
                    registry = load_registry(schemas.paths, demo=schemas.demo)
                except DlxtoolError as exc:
                    if required:
                        raise
                    app.warn(f"protobuf bodies shown as base64: {exc.message}")
            loaded.append(registry)
        return loaded[0]

    return load

"""pika's own types, named for annotations outside dlxtool.broker: the operations (dlxtool.ops) never import pika
(tests/test_layering.py), yet a channel or a message's properties they hold is pika's. Type checking only: pika is
not imported here at run time (`dlxtool --help` does not pay for it), so import these under TYPE_CHECKING.

pyright reads pika's types from the typeshed stubs it bundles; mypy has none for pika (pyproject:
ignore_missing_imports) and sees Any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pika.adapters.blocking_connection import BlockingChannel as BlockingChannel
    from pika.adapters.blocking_connection import BlockingConnection as BlockingConnection
    from pika.spec import Basic as Basic
    from pika.spec import BasicProperties as BasicProperties

"""AMQP 1.0 on RabbitMQ 4.x: the building blocks (docs/amqp10.md).

- connection.py  open_connection(profile): the profile's URLs, credentials, TLS and vhost over AMQP 1.0 (proton)
- addresses.py   RabbitMQ 4.x's address format v2: /queues/NAME, /exchanges/NAME/KEY
- links.py       HeadReader (a queue's head, credit-bounded, unsettled until settled) and Sender (settled outcomes)
- outcomes.py    the outcomes as values: accepted / rejected / released / modified, for both directions

python-qpid-proton is the `amqp10` extra and is imported only inside these modules' functions (`--help` and the
0.9.1 path never pay its ~0.3 s import); available() tells whether it is installed. The message format itself
(sections, typed values, JSON) is dlxtool.amqp10_message, which needs no proton.
"""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "install the AMQP 1.0 extra: pip install 'dlxtool[amqp10]' (python-qpid-proton; it compiles: gcc, " \
               "the Python headers, and pkg-config + libssl-dev for TLS)"


def available() -> bool:
    """Whether python-qpid-proton is installed (without importing it)."""
    return importlib.util.find_spec("proton") is not None

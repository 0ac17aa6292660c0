"""The private names of pika that dlxtool uses, each with where pika defines it and why we use it.

pika (pinned >=1.4.4,<1.5 in pyproject.toml) has no public frame-level API: no way to read a delivery's
frames without building a Python object per frame, to know whether a channel has events waiting, to abort a
connection whose broker stopped reading, or to see the server properties of connection.start. Where dlxtool
needs one of those, it uses pika's internals — in the audited places marked `noqa: SLF001`, and only the names
below. tests/broker/test_pika_contract.py fails loudly when a name used in dlxtool is missing here, or when the
installed pika no longer defines one (the signal to re-check those places before raising the pin). README
"Why we own this" gives the measured reasons.
"""

from __future__ import annotations

# name -> (pika module that defines it, what dlxtool uses it for)
PRIVATE_NAMES: dict[str, tuple[str, str]] = {
    "_impl": ("adapters/blocking_connection.py",
              "BlockingConnection/BlockingChannel → the underlying connection/channel: server properties, params,"
              " frame hooks"),
    "_consumers": ("channel.py", "which consumer tags a channel has, for the fast delivery reader"),
    "_cancelled": ("channel.py", "consumer tags pika rejects deliveries for after basic.cancel"),
    "_body_max_length": ("connection.py", "frame_max minus overhead: how publish frames are split"),
    "_state": ("channel.py", "whether a channel is open before writing raw frames to it"),
    "_on_deliver": ("channel.py", "pika's own delivery path, the fallback of the fast reader"),
    "_frame_buffer": ("connection.py", "the bytes read from the socket, parsed by the fast reader"),
    "_STATE_ACTIVE": ("adapters/utils/io_services_utils.py", "whether the transport still writes"),
    "_raise_if_not_open": ("channel.py", "the same closed-channel error pika raises, from raw publishes"),
    "_output_marshaled_frames": ("connection.py", "writing pre-encoded publish frames in one call"),
    "_on_data_available": ("connection.py", "the hook where the fast reader takes over frame parsing"),
    "_tx_buffers": ("adapters/utils/io_services_utils.py", "whether written frames still wait in pika's buffer"),
    "_tx_buffered_byte_count": ("adapters/utils/io_services_utils.py", "how many bytes still wait to be sent"),
    "_transport": ("adapters/base_connection.py", "the socket transport the fast reader and writer drive"),
    "_terminate_stream": ("connection.py", "dropping a connection at once as pika does on a lost stream: a broker "
                          "that stopped reading it (blocked), a channel close never answered"),
    "_set_cookie": ("channel.py", "giving the BlockingChannel its cookie when dlxtool wraps a raw channel"),
    "_send_message": ("connection.py", "pika's own publish, the fallback codec"),
    "_process_frame": ("connection.py", "handing frames the fast reader does not take back to pika"),
    "_on_socket_writable": ("adapters/utils/io_services_utils.py", "flushing written frames at once"),
    "_on_socket_readable": ("adapters/utils/io_services_utils.py", "reading more than pika's per-call limit"),
    "_closed_result": ("adapters/blocking_connection.py", "whether the connection has closed, without a call"),
    "_ready_events": ("adapters/blocking_connection.py", "whether connection events wait to be dispatched"),
    "_channels_pending_dispatch": ("adapters/blocking_connection.py", "whether channel events wait"),
    "_MAX_RECV_BYTES": ("adapters/utils/io_services_utils.py", "pika's per-read size, raised for big bodies"),
    "_MAX_CONSUME_BYTES": ("adapters/utils/io_services_utils.py", "pika's per-loop read budget, raised likewise"),
}

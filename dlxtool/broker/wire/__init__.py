"""The AMQP wire codec: frames in (deliveries, confirms, content headers), frames out (publishes).

- codec.py — the one setting (`c`, `python`, `pika`; DLXTOOL_CODEC) and the object everything that
  reads or writes frames asks: connect() installs its reader, channels register consumers with it, the
  publisher publishes through it, replay takes its C header rewrite from it.
- frames.py — dlxtool's own reader and encoder, byte- and value-equal to pika's (pika's private names
  live here and in broker/channel.py only).
- hotpath.py — the optional C extension (_hotpath.c) that carries the per-message work on `c`.
"""

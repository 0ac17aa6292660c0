"""Editing dead letters: `replay --edit` and `load --reencode`. Pure logic: no click, no pika, no broker.

- dlxtool.editing.bodies: a body opened for editing (inflated, unframed, shown as protobuf JSON, JSON, text or
  base64) and closed again (re-encoded, framed, compressed as it was); only what changed is re-encoded.
- dlxtool.editing.document: the one document an editor shows (every message's body, properties and headers),
  read back, checked and diffed.
- dlxtool.editing.edits: what changed per message, and the messages shown, found again by fingerprint when the
  replay reads the queue.
- dlxtool.editing.reencode: a record whose `decoded` was changed (`dump | jq | load --reencode`), re-encoded.
"""

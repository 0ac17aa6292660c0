"""Exceptions raised by proto_registry.

Every error carries a one-line ``message`` (what went wrong, and where) and an optional ``hint``
(what to do about it). Callers such as the dlxtool CLI map them to exit codes; nothing here prints.
"""

from __future__ import annotations


class ProtoRegistryError(Exception):
    """Base class: ``message`` says what and where, ``hint`` says what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class SourceNotFoundError(ProtoRegistryError):
    """A proto path or descriptor-set file does not exist or cannot be read."""


class CompileError(ProtoRegistryError):
    """protoc rejected a .proto file; ``file``/``line``/``column`` point at the first error."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        protoc_output: str = "",
    ) -> None:
        super().__init__(message, hint)
        self.file = file
        self.line = line
        self.column = column
        self.protoc_output = protoc_output


class DescriptorSetError(ProtoRegistryError):
    """A descriptor-set file is not a valid FileDescriptorSet, or misses imported files."""


class SchemaConflictError(ProtoRegistryError):
    """Two sources define the same file or the same type differently."""


class UnknownTypeError(ProtoRegistryError):
    """A type name given by the user (or a hint) is not in the registry."""


class DecodeError(ProtoRegistryError):
    """A payload does not parse as the requested type."""

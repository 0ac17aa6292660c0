"""Protobuf type registry: load schemas, identify and decode payloads. No click, no pika."""

"""dlxtool: peek, decode, explain, replay and purge RabbitMQ dead letters."""

__version__ = "0.1.0"

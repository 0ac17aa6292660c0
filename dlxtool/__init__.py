"""dlxtool: peek, decode, explain, replay and purge RabbitMQ dead letters."""

# The one place the version is written: pyproject.toml reads it from here at build time
# ([tool.setuptools.dynamic]), and `dlxtool --version` prints it without importlib.metadata.
__version__ = "0.1.0"

"""The tools' commands of the ``episodestream`` command line.

Each module exposes ``register(subparsers)``, named by an entry point of the
``episodestream.commands`` group (tools/pyproject.toml), which ``episodestream.cli`` loads.
"""

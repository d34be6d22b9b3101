"""episodestream-tools: the benchmark, the demo, local serving and synthetic datasets.

- :mod:`episodestream_tools.bench`: ``bench``, ``bench-summary`` and ``demo``'s library.
- :mod:`episodestream_tools.serving`: a private nginx and the WAN emulator in front of it.
- :mod:`episodestream_tools.synthetic`: synthetic LeRobot v3 datasets (``make-dataset``).
- :mod:`episodestream_tools.commands`: the command-line commands, registered with
  ``episodestream`` through the ``episodestream.commands`` entry-point group.

Built on the public names of :mod:`episodestream` only; released with it, same version.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

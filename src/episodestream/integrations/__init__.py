"""Integrations with other projects' training code (imported on demand, never by the core).

- :mod:`episodestream.integrations.lerobot`: LeRobot's own ``train()`` on a streamed dataset.
"""

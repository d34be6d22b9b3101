"""pytest fixtures: storage."""

"""pytest fixtures: synthetic."""

"""pytest fixtures: media."""

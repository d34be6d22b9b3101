"""pytest fixtures: serving."""

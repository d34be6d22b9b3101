"""datasets layer (see DESIGN.md)."""

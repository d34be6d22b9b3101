"""decode layer (see DESIGN.md)."""

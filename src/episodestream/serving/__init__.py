"""serving layer (see DESIGN.md)."""

"""cache layer (see DESIGN.md)."""

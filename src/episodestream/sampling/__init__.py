"""sampling layer (see DESIGN.md)."""

"""bench layer (see DESIGN.md)."""

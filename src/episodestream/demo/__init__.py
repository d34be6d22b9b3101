"""demo layer (see DESIGN.md)."""

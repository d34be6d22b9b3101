"""manifest layer (see DESIGN.md)."""

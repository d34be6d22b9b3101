"""lerobot layer (see DESIGN.md)."""

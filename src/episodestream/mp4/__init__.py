"""mp4 layer (see DESIGN.md)."""

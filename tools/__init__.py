"""Tools beside the product (not imported by it)."""

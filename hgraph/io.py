"""Graph loaders (placeholder until the text loaders land)."""

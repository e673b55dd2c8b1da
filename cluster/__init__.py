"""How hgraph reaches Ray: an embedded local Ray by default, an existing cluster by address,
Ray Jobs submission, and a local multi-node cluster for trying things."""

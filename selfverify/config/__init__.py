"""The run configuration: the schema (a leaf) and its loader."""

"""One module per schema revision; each states its DDL itself, never through the models,
which describe only the newest schema."""

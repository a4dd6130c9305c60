"""The SQL engine: every query kind as statements DuckDB runs on a snapshot's base and the
levels of its overlay, for what memory does not answer."""

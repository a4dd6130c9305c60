"""How snapshots reach a node and what it tells of them: pulling layers from the snapshot
store, the version switches it announces, and how late it is behind what was published."""

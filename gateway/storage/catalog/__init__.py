"""A node's snapshots as it serves them: the DuckDB hub that attaches their files, the delta
layers held as levels over each base, the images a node's workers map, and the chains'
install, lease and release."""

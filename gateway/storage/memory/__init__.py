"""The in-memory engine: each snapshot's keyed stores as sorted columns, runs of rows per key
for windows and histories, and the lookups, pages, ordered walks and totals read from them."""

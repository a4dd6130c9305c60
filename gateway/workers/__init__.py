"""A node as several worker processes on one port: the keeper, which joins the cluster,
syncs and installs, and its followers, which serve what it tells them (README: Workers)."""

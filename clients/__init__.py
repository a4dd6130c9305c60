"""The typed clients' hand-written parts (README: Typed clients), importable from the
repository for the tests and the benchmark; the clients themselves are generated."""

"""The Python client's hand-written modules, copied into the generated package."""

"""A real etcd for the tests: stategate/etcd.py, which the benchmark starts too."""

from __future__ import annotations

from stategate.etcd import ETCD, READY_S, Etcd, settled

__all__ = ["ETCD", "READY_S", "Etcd", "settled"]

"""Tests across Linux network namespaces: a NAT fabric (fabric.py) and what py-libp2p does across it."""

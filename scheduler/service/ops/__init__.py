"""Ops: process plumbing the composition root wires: HTTP server, TLS, logging, GC policy, metrics."""

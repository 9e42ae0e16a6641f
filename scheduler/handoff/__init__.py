"""Handoff: what a placed gang gives its runtime (rank tables, annotations, manifests, launcher)."""

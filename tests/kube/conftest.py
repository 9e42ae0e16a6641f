"""Fixtures of the Kubernetes adapter tests."""

from tests.kube.kube_fixtures import api_client, double  # noqa: F401 (pytest fixtures)

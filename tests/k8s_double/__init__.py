"""An in-memory Kubernetes API server double speaking the real HTTP API on loopback (see `server`)."""

from tests.k8s_double.server import ApiServerDouble
from tests.k8s_double.store import CORE_RESOURCES, CRD_RESOURCES, ApiError, Resource

__all__ = ["ApiServerDouble", "ApiError", "CORE_RESOURCES", "CRD_RESOURCES", "Resource"]

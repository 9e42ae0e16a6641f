"""The local runtime: a small transformer-style MLP trained with real TP/PP/DP over torch.distributed (gloo, CPU).

torch is an optional extra (`pip install meshfit[runtime]`): only the modules in this package
import it, and `require_torch` turns its absence into one clear error.
"""

from __future__ import annotations


class RuntimeUnavailable(RuntimeError):
    """The local runtime cannot run here (torch missing, or the job uses an axis it does not model)."""


def require_torch() -> None:
    """Raise RuntimeUnavailable with install advice unless torch with torch.distributed (gloo) is importable."""
    try:
        import torch.distributed as dist
    except ImportError:
        raise RuntimeUnavailable("the local runtime needs torch: pip install 'meshfit[runtime]' (for the CPU build, "
                                 "first: pip install torch --index-url https://download.pytorch.org/whl/cpu)") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise RuntimeUnavailable("the local runtime needs torch.distributed with the gloo backend")

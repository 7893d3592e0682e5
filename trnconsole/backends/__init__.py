"""Where jobs run: one module per backend behind the one interface of `base.Backend`."""

from __future__ import annotations

import importlib

from ..core.errors import UsageError
from .base import Backend

# name -> "module:class"; a new backend is one new module and one line here.
REGISTRY = {
    "local": "trnconsole.backends.local:LocalBackend",
    "sagemaker": "trnconsole.backends.sagemaker:SageMakerBackend",
    "batch": "trnconsole.backends.batch:BatchBackend",
    "k8s": "trnconsole.backends.kubernetes:KubernetesBackend",
}


def get_backend(name: str) -> Backend:
    target = REGISTRY.get(name)
    if target is None:
        raise UsageError(f"--backend {name}: not available; choose one of {', '.join(REGISTRY)}")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)()

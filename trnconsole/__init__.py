"""trnconsole: launch, watch, compare and rerun PyTorch/XLA training jobs on Trainium, GPUs and CPUs."""

__version__ = "0.1.0"

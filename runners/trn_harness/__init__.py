"""The harness the bundled runners share: flags, data, device set-up, the training loop and its outputs.

Self-contained: it never imports trnconsole, so the runners work under torchrun, in a SageMaker source
directory or in a container with only torch (and torch-xla or torch-neuronx) installed.
"""

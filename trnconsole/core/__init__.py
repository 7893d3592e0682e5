"""The domain core: run specs, the run store, metric events and their parsers, bounded series.

Nothing here imports Textual, boto3, kubernetes or torch.
"""

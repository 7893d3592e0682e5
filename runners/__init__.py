"""The bundled training runners (BERT, GPT-2, ViT): scripts run as they are, never imported by the console."""

"""``hf:`` models: Hugging Face transformers from a config, random weights (see ``spec.py``)."""

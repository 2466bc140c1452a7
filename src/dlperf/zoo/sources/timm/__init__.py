"""``timm:`` models: ``timm.create_model(NAME, pretrained=False)`` (see ``spec.py``)."""

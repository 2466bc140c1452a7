"""``file:`` models and ``dlperf.models`` entry points: a user's function returns the model,
a batch maker and the loss (the contract is in ``spec.py``)."""

"""EVALUATE: the metrics of a model's predictions against a TARGET column, recorded in the catalog."""

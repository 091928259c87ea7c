"""Hyper-parameter studies (TUNE): search spaces, algorithms, stage trees, training and executors."""

"""Experiments around the models rather than jobs a model is trained for: architecture ablations and the
speed benchmarks against transformers' own models."""

"""Data: real benchmark loaders, the synthetic math world, corpora and decontamination."""

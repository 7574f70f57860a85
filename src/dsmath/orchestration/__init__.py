"""The pipeline plumbing shared by `make repro` and the Prefect flow."""

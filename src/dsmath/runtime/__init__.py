"""What every stage process shares: params, seeding and metrics (stage), restoring outputs, processes and devices,
and MLflow tracking."""

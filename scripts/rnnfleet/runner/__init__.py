"""How a job runs: the job client, warm workers, device and GPU slots, file locks, the job
functions themselves (read settings, run the core, write outputs and metrics)."""

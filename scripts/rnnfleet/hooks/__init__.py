"""What a run does around its jobs: recovery after killed runs, previous models kept on failed
re-trains, results after failures, configuration checks, the version-guarded Snakemake speed-ups."""

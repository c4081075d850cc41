"""The Snakemake process's own work on rnnfleet's terms (rules/*.smk call it): configuration
checks and the datasets sheet, settings changes and update plans before a run, recovery after
killed runs and previous models kept on failed re-trains, results after failures, tracking."""

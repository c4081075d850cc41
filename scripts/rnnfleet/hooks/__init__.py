"""Changes to Snakemake's own functions, and nothing else: each listed with its stock source's
hash in snakemake_contract.CONTRACT (docs/architecture.md, "What rnnfleet changes in Snakemake")."""

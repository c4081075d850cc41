"""The settings search (`snakemake tune`, docs/tuning.md): what may be searched, the search
over a sample of datasets on their validation parts, its results, and the held-out verdict."""

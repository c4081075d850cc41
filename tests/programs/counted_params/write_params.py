open(snakemake.output[0], "w").write(f"{snakemake.params.n}\n")

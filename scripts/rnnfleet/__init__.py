"""rnnfleet: train one RNN per dataset. Plain functions used by the Snakemake scripts and the tests."""

"""The train path, read top to bottom: fit.py plans a train job's fits and makes each as
loop.py (the training) then evaluate.py (the evaluation after it), then the model file's
contents with modelfile.py; walkforward.py and updating.py are the folds and the updates it
plans. This file imports nothing, so that modelfile.py (the run's model-file checks) and
updating.py load in the Snakemake process without torch."""

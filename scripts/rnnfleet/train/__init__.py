"""The train path, read top to bottom: fit.py plans a train job's fits and calls, in order,
loop.py (the training), evaluate.py (the evaluation after it) and modelfile.py (the model
file's contents); walkforward.py and updating.py are the folds and the updates it plans.
Nothing here imports torch at import time of this package."""

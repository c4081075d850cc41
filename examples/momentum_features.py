"""An example of your own features for rnnfleet.

rnnfleet calls each feature function with one dataset's bars: a pandas DataFrame with the
columns timestamp, open, high, low, close, volume, one row per bar, oldest first. It returns
one value per bar, shape (rows,), or one row of values per bar, shape (rows, k). Row t may use
bars up to t only (anything later would leak the future into training). The first rows may be
NaN while the function needs more history (rnnfleet skips them); every later row must be finite.
"""

import numpy as np
import pandas as pd


def momentum(bars: pd.DataFrame) -> np.ndarray:
    """The close log return over the last 5 and 15 bars and the volatility of the last 15."""
    log_close = pd.Series(np.log(bars["close"].to_numpy(dtype=float)))
    one_bar_returns = log_close.diff()
    return np.column_stack(
        [
            log_close - log_close.shift(5),
            log_close - log_close.shift(15),
            one_bar_returns.rolling(15).std(),
        ]
    )
